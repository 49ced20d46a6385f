"""Every figure megamlm draws, in one module: the set-up and atomic save they share, the run overlays
(tools/plot_runs.py), the evaluation figures (tools/evaluate.py) and the study report's figures.

Each drawing function takes numbers already prepared by its caller (curves, means and 95% intervals), so this
module stays on the lowest floor and knows nothing of runs, plans or statistics. matplotlib is a core dependency;
it is imported inside these functions, on the non-interactive Agg backend, so importing this module costs nothing.
``save`` writes a temporary file beside the target and renames it over the target, so a reader never sees half a
PNG, and closes the figure.
"""

from __future__ import annotations

import os
from pathlib import Path

DPI = 120
"""Resolution of every saved figure."""
MISSING = ("plotting needs matplotlib, a dependency of megamlm, which does not import here; reinstall it "
           "(pip install -e .)")
"""The message for a figure asked for where matplotlib is broken or was removed."""
_available: list[bool] = []


def available() -> bool:
    """True when matplotlib imports (checked once per process)."""
    if not _available:
        try:
            import matplotlib  # noqa: F401

            _available.append(True)
        except Exception:  # a broken install counts as absent
            _available.append(False)
    return _available[0]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display); ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(*grid: int, **options):
    """A new ``(figure, axes)``: ``plt.subplots(*grid, **options)`` on the Agg backend."""
    return pyplot().subplots(*grid, **options)


def colors() -> list[str]:
    """The colors of the current style's cycle, in order."""
    return pyplot().rcParams["axes.prop_cycle"].by_key()["color"]


def engineering_formatter():
    """An axis formatter for large counts: 250k, 1.5M, 2G."""
    from matplotlib.ticker import EngFormatter

    return EngFormatter(sep="")


def close(fig) -> None:
    """Release a figure that is not saved."""
    pyplot().close(fig)


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (its folder made if needed) atomically: to a temporary name beside it, then renamed
    over it; the figure is closed whether or not writing succeeded. Returns the path."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight")
        os.replace(tmp, path)
        return path
    finally:
        close(fig)


def _panels(count: int, columns: int, size: tuple[float, float]):
    """A figure of ``count`` panels, ``columns`` a row at most; the unused ones hidden. Returns (figure, panels)."""
    columns = min(columns, count)
    rows = (count + columns - 1) // columns
    fig, axes = figure(rows, columns, figsize=(size[0] * columns, size[1] * rows), squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    return fig, list(axes.flat)


def _errorbars(ax, points: list[tuple], label: str) -> None:
    """(x, mean, 95% half-width) points as one line with error bars."""
    ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o", capsize=3,
                label=label)


def _log_lr_axis(ax, lrs: list[float]) -> None:
    """A log x axis with a tick at each learning rate of the grid, written as given."""
    grid = sorted(set(lrs))
    ax.set_xscale("log")
    ax.set_xticks(grid)
    ax.set_xticklabels([f"{lr:g}" for lr in grid], fontsize=7)
    ax.minorticks_off()


def _score_axis(ax, points: list[tuple]) -> None:
    """Keep the y axis within the scores' 0-100 range: with 2 seeds a 95% t-interval is 12.7 standard errors
    wide and would otherwise stretch the axis far below 0 (the bars then run off the plot)."""
    if not points:
        return
    low = min(p[1] - p[2] for p in points)
    high = max(p[1] + p[2] for p in points)
    means = [p[1] for p in points]
    if 0 <= min(means) and max(means) <= 100 and (low < 0 or high > 100):
        ax.set_ylim(max(0.0, low - 2), min(100.0, high + 2))


def _grouped_bars(ax, groups: list[str], bars: dict[str, dict[str, tuple[float, float]]]) -> None:
    """One bar per series in each group: ``bars`` is series -> group -> (mean, 95% half-width)."""
    width = 0.8 / max(1, len(bars))
    for i, (label, by_group) in enumerate(bars.items()):
        xs, ys, errs = [], [], []
        for j, group in enumerate(groups):
            if group in by_group:
                xs.append(j + (i - (len(bars) - 1) / 2) * width)
                ys.append(by_group[group][0])
                errs.append(by_group[group][1])
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=label)
    ax.set_xticks(range(len(groups)))


# ---- run overlays (tools/plot_runs.py) -------------------------------------------------------------------------


def run_validation(curves: list[tuple[str, bool, dict]], x_label: str, path: Path) -> Path:
    """Validation MLM and CLM loss of several runs: ``curves`` is (legend, has points, metric -> (xs, ys))."""
    fig, axes = figure(1, 2, figsize=(11, 4))
    for ax, metric, title in zip(axes, ("mlm_loss", "clm_loss"), ("validation MLM loss", "validation CLM loss")):
        for legend, drawn, series in curves:
            ax.plot(*series[metric], marker="o", markersize=3, label=legend, linestyle="-" if drawn else "none")
        ax.set(xlabel=x_label, ylabel="loss", title=title)
        ax.xaxis.set_major_formatter(engineering_formatter())  # token counts stay readable
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return save(fig, path)


def run_training_loss(curves: list[tuple[str, tuple[list, list], tuple[tuple[int, str], ...]]], path: Path) -> Path:
    """Training loss of several runs: ``curves`` is (name, (steps, losses), the run's markers: (step, what changes
    after it) at each phase boundary or objective switch), each marker a dashed line labelled at the top."""
    fig, ax = figure(figsize=(7, 4))
    for name, series, markers in curves:
        (line,) = ax.plot(*series, label=name)
        for step, words in markers:
            ax.axvline(step, color=line.get_color(), linestyle="--", alpha=0.7)
            ax.text(step, 1.0, f" {words}", transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="right",
                    fontsize=7, color=line.get_color())
    ax.set(xlabel="step", ylabel="training loss", title="training loss (dashed: a phase boundary, what changes)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


# ---- evaluation (tools/evaluate.py) ----------------------------------------------------------------------------


def score_per_model(summaries: list, path: Path) -> Path:
    """Test score at the best LR per model (bars) for each task; ``summaries`` are eval.aggregate.TaskSummary."""
    tasks = sorted({s.task for s in summaries}, key=lambda t: (next(s.family for s in summaries if s.task == t), t))
    models = sorted({s.model for s in summaries})
    fig, ax = figure(figsize=(max(5, 1.6 * len(tasks) * max(1, len(models) / 3)), 3.8))
    _grouped_bars(ax, tasks, {m: {s.task: (s.test_mean, s.test_ci) for s in summaries if s.model == m}
                              for m in models})
    ax.set_xticklabels([f"{t}\n({next(s.metric for s in summaries if s.task == t)})" for t in tasks], fontsize=8)
    ax.set_ylabel("test score at best LR (mean ± 95% CI)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def score_vs_lr(rows: list, path: Path) -> Path:
    """Test score against the learning rate, one panel per task; ``rows`` are eval.aggregate.LrScores."""
    tasks = sorted({r.task for r in rows})
    models = sorted({r.model for r in rows})
    fig, axes = _panels(len(tasks), 3, (4.2, 3.2))
    for ax, task in zip(axes, tasks):
        for model in models:
            points = sorted((r.lr, r.test_mean, r.test_ci) for r in rows if r.task == task and r.model == model)
            if points:
                _errorbars(ax, points, model)
        _log_lr_axis(ax, [r.lr for r in rows if r.task == task])
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("learning rate")
        ax.set_ylabel("test score")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)


# ---- the study report (megamlm/study/reporting/report.py) -----------------------------------------------------------


def study_validation(lines: list[tuple[int, int, str | None, list[dict]]], metrics, path: Path) -> Path | None:
    """Validation curves of a study's runs, one panel per (metric, title) of ``metrics``: ``lines`` is (arm index:
    the color, seed index: the line style, legend or None, the run's validation records); None if none is drawn."""
    if not lines:
        return None
    fig, axes = figure(1, len(metrics), figsize=(16, 4.2))
    palette = colors()
    for arm, seed, legend, curve in lines:
        for ax, (metric, title) in zip(axes, metrics):
            points = [(r["step"], r[metric]) for r in curve if r.get(metric) is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], color=palette[arm % len(palette)],
                    linestyle=("-", "--", ":", "-.")[seed % 4], marker="o", markersize=2.5, label=legend)
            ax.set(xlabel="step (continuations after their parent's last step)", title=title)
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("validation on held-out documents; one color per arm, one line style per seed", fontsize=9)
    return save(fig, path)


def study_scores(panels: dict[str, dict[str, list[tuple]]], x_label: str, path: Path) -> Path | None:
    """Test score against ``x_label``, one panel per task: ``panels`` is task -> legend -> [(x, mean, 95% half-
    width)] (every task of the report gets a panel); None if no line has a point."""
    if not any(points for lines in panels.values() for points in lines.values()):
        return None
    fig, axes = figure(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (task, lines) in zip(axes[0], panels.items()):
        for legend, points in lines.items():
            _errorbars(ax, points, legend)
        _score_axis(ax, [p for points in lines.values() for p in points])
        ax.set(xlabel=x_label, ylabel="test score (mean, 95% CI over seeds)", title=task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)


def study_lr_sensitivity(panels: dict[str, dict[str, list[tuple]]], path: Path) -> Path | None:
    """Score against the fine-tuning LR: ``panels`` is family -> arm -> [(LR, mean, 95% half-width)]."""
    if not panels:
        return None
    fig, axes = _panels(len(panels), 4, (4.4, 3.6))
    for ax, (family, lines) in zip(axes, panels.items()):
        shown = [p for points in lines.values() for p in points]
        for legend, points in lines.items():
            _errorbars(ax, points, legend)
        _log_lr_axis(ax, [p[0] for p in shown])
        _score_axis(ax, shown)
        ax.set(xlabel="fine-tuning learning rate", ylabel="test score (mean, 95% CI over seeds)", title=family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("fine-tuning learning-rate sensitivity: each seed's model at every LR of the grid", fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def study_stability(bars: dict[str, dict[str, tuple[float, float]]], families: list[str], path: Path) -> Path | None:
    """The stability loss per arm and family: ``bars`` is arm -> family -> (mean, 95% half-width)."""
    if not bars or not families:
        return None
    fig, ax = figure(figsize=(max(5.0, 1.2 * len(bars) * len(families) / 2 + 3), 3.8))
    _grouped_bars(ax, families, bars)
    ax.set_xticklabels(families, fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel("score at best LR − mean at the other LRs")
    ax.set_title("fine-tuning stability (lower: less lost away from the best LR)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6)
    return save(fig, path)


def study_continuation_gain(panels: dict[str, dict[str, list[tuple]]], path: Path) -> Path | None:
    """Continued-pretraining gain against continued steps: ``panels`` is family -> line -> [(step, mean, 95%
    half-width)]."""
    if not panels:
        return None
    fig, axes = _panels(len(panels), 4, (4.4, 3.6))
    for ax, (family, lines) in zip(axes, panels.items()):
        for legend, points in lines.items():
            _errorbars(ax, points, legend)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set(xlabel="continued-pretraining steps", ylabel="gain over the parent (95% CI over seeds)", title=family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return save(fig, path)
