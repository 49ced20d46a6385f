"""The study report (Markdown, figures beside it) from what exists under the study's root: the runs' metrics.jsonl
files and the fine-tuning results.

An *arm* is a run without its seed (``clm100-mlm100-m40``); its seeds are its replicates. For each arm: the
validation curves of every seed (a branch's curve is its parent's up to the branch step, then its own; a
continuation's follows its parent's last step), the final validation scores with their mean and 95% t-interval
over seeds, and the differences between arms: Welch's two-sided t-test over pretraining seeds (where both arms
have a single pretraining seed, as in the paper, over the fine-tuning seeds at each model's selected LR, and the
table says which), the difference with its 95% Welch-Satterthwaite interval and its Holm-adjusted p-value over
the comparisons of the table; significant only at adjusted p < 0.05; fewer than 2 values in an arm: n/a.
Downstream: one table per task family (best LR on validation per model, test mean and 95% CI over fine-tuning
seeds), the arms' scores over pretraining seeds, score against the CLM fraction per budget, score against
pretraining steps from the evaluated intermediate checkpoints, and (``evidence.py``) the paper's other figures,
each only where the study has its data: score against the fine-tuning LR per arm and task family and the
stability loss per arm (both need 2 or more LRs), the continued-pretraining gain against continued steps from
each parent; then a section answering the paper's claims (a)-(e) with Welch's test and Holm's correction.

A study planned with ``--scale`` < 1 is a rehearsal of the pipeline: its report says so at the top, keeps the
tables and figures, makes no test and names no difference significant, and is written under the runs' root
(``ROOT/rehearsal/REPORT.md``), never to the study's own report.
"""

from __future__ import annotations

import json
import os
import platform
from collections import defaultdict
from pathlib import Path

from megamlm import figures as figs  # `figures` is write_report's flag
from megamlm.eval.aggregate import TaskSummary, collect, summarize
from megamlm.eval.metrics import SIGNIFICANCE, Comparison, compare, holm, mean_confidence_interval
from megamlm.eval.registry import task_display_name
from megamlm.eval.report import markdown_table
from megamlm.eval.results import RunKey, write_text_atomic
from megamlm.errors import UserError
from megamlm.study.commands import REPO, all_evaluated_models, evaluated_models, status_file
from megamlm.study.cost import throughput_for
from megamlm.study.evidence import (  # noqa: F401 (Arm, PRETRAINING_SEEDS: where they were defined before)
    FINETUNING_SEEDS, PRETRAINING_SEEDS, Arm, Sample, Scores, arms, claims_section, continuation_gains, lr_curves,
    sample_values, stability, test_basis)
from megamlm.study.local import finished_step
from megamlm.study.plan import Plan, Run
from megamlm.study.table import plan_table
from megamlm.training.metrics_file import read_metrics

VALIDATION_METRICS = (("mlm_loss", "validation MLM loss"), ("mlm_accuracy", "validation MLM accuracy"),
                      ("clm_loss", "validation CLM loss"))


def validation_curve(plan: Plan, run: Run) -> list[dict]:
    """Validation records of ``run`` from step 0 of its lineage: a branch's parent's up to the branch step; a
    continuation's steps shifted by its parent's length (``step`` then counts every step the model trained)."""
    own = [r for r in _metrics(plan, run) if r.get("kind") == "validation"]
    if run.parent is None:
        return own
    parent = plan.run(run.parent)
    before = validation_curve(plan, parent)
    if run.branch_step:
        return [r for r in before if r["step"] <= run.branch_step] + [r for r in own if r["step"] > run.branch_step]
    offset = parent.train_iters
    return before + [{**r, "step": r["step"] + offset} for r in own if r["step"] > 0]


def drawn_curve(plan: Plan, run: Run) -> list[dict]:
    """The part of ``validation_curve`` a figure draws: a branch or continuation from the parent's record where it
    leaves the parent on (the parent's own line stays visible instead of being drawn over)."""
    start = run.branch_step or (plan.run(run.parent).train_iters if run.parent else 0)
    return [r for r in validation_curve(plan, run) if r["step"] >= start]


def _metrics(plan: Plan, run: Run) -> list[dict]:
    folder = Path(plan.save_dir(run))
    if not (folder / "metrics.jsonl").is_file():
        return []
    try:
        return read_metrics(folder)
    except UserError:
        return []


def final_validation(plan: Plan, run: Run) -> dict | None:
    """The validation record at the run's last step, if the run has finished."""
    if not finished_step(plan.save_dir(run), run.train_iters):
        return None
    last = plan.run(run.parent).train_iters if run.is_continuation and not run.branch_step else 0
    records = [r for r in validation_curve(plan, run) if r["step"] == run.train_iters + last]
    return records[-1] if records else None


def _fmt(mean: float, ci: float, digits: int) -> str:
    return f"{mean:.{digits}f} ± {ci:.{digits}f}" if ci else f"{mean:.{digits}f}"


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _cell(c: Comparison, adjusted: float, digits: int) -> str:
    if not c.tested:
        why = "fewer than 2 values in an arm" if min(c.n_a, c.n_b) < 2 else "no spread in either arm"
        return f"{c.difference:+.{digits}f} (n/a: {why})"
    low, high = c.difference - c.half_width, c.difference + c.half_width
    mark = " **significant**" if adjusted < SIGNIFICANCE else ""
    return f"{c.difference:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}], {_p(adjusted)}{mark}"


def comparison_table(values: dict[str, dict[str, Sample]], metrics: list[str], digits: int,
                     rehearsal: bool = False) -> str:
    """Every pair of arms on every metric: the difference of means, and (not in a rehearsal) Welch's test with its
    95% interval and Holm-adjusted p-value over the table's tests."""
    labels = list(values)
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]
    if not pairs:
        return ""
    cells: dict[tuple[str, str, str], Comparison] = {}
    bases = {}
    for a, b in pairs:
        bases[(a, b)] = test_basis(values[a], values[b])
        for metric in metrics:
            sa, sb = values[a].get(metric), values[b].get(metric)
            if sa and sb and sample_values(sa, bases[(a, b)]) and sample_values(sb, bases[(a, b)]):
                cells[(a, b, metric)] = compare(sample_values(sa, bases[(a, b)]), sample_values(sb, bases[(a, b)]))
    keys = list(cells)
    adjusted = dict(zip(keys, holm([cells[k].p_value for k in keys]))) if keys else {}
    header = "| A − B | test over | " + " | ".join(metrics) + " |\n|---|---|" + "---|" * len(metrics) + "\n"
    rows = []
    for a, b in pairs:
        row = []
        for metric in metrics:
            c = cells.get((a, b, metric))
            if c is None:
                row.append("–")
            elif rehearsal:
                row.append(f"{c.difference:+.{digits}f}")
            else:
                row.append(_cell(c, adjusted[(a, b, metric)], digits))
        rows.append(f"| {a} − {b} | {'–' if rehearsal else bases[(a, b)]} | " + " | ".join(row) + " |")
    table = header + "\n".join(rows) + "\n"
    if rehearsal:
        return ("Differences between arms (mean of A − mean of B), untested: a rehearsal of the pipeline draws no "
                "conclusions.\n\n" + table)
    tested = [k for k in keys if cells[k].tested]
    significant = [f"{a} − {b} ({metric})" for (a, b, metric) in tested if adjusted[(a, b, metric)] < SIGNIFICANCE]
    finetuning = any(bases[p] == FINETUNING_SEEDS for p in pairs)
    summary = (f"Significant at Holm-adjusted p < {SIGNIFICANCE} ({len(tested)} tests in this table): "
               + ("; ".join(significant) if significant else "none") + ".\n\n" if tested else
               "No difference in this table could be tested (fewer than 2 values in an arm, or no spread).\n\n")
    explain = ("Differences between arms: mean of A − mean of B, its 95% interval (Welch-Satterthwaite) in brackets, "
               "and the p-value of Welch's two-sided t-test (unequal variances) over the seeds named under "
               "*test over*, adjusted with Holm's method over the tests of this table; **significant** = adjusted "
               f"p < {SIGNIFICANCE}. n/a: no test (fewer than 2 values in an arm, or no spread).")
    if finetuning:
        explain += (" Over fine-tuning seeds (both arms have one pretraining seed): the variance of fine-tuning "
                    "alone, at each model's selected LR; it says whether the two pretrained models differ, not "
                    "whether their recipes would over other pretraining seeds.")
    return summary + explain + "\n\n" + table


def validation_section(plan: Plan, rehearsal: bool = False) -> tuple[str, dict[str, dict[str, Sample]]]:
    values: dict[str, dict[str, Sample]] = {}
    lines = ["| arm | seeds | " + " | ".join(title for _, title in VALIDATION_METRICS) + " |",
             "|---|---|" + "---|" * len(VALIDATION_METRICS)]
    for arm in arms(plan):
        finals = [f for f in (final_validation(plan, run) for run in arm.runs) if f is not None]
        if not finals:
            continue
        values[arm.label] = {m: Sample([f[m] for f in finals if f.get(m) is not None]) for m, _ in VALIDATION_METRICS}
        cells = []
        for metric, _ in VALIDATION_METRICS:
            seeds = values[arm.label][metric].pretraining
            if not seeds:
                cells.append("–")
                continue
            mean, ci = mean_confidence_interval(seeds)
            cells.append(f"{_fmt(mean, ci, 3)} ({', '.join(f'{v:.3f}' for v in seeds)})")
        lines.append(f"| {arm.label} | {len(finals)} | " + " | ".join(cells) + " |")
    if not values:
        return "No run has finished yet.\n", values
    text = ("Final validation scores: mean ± 95% t-interval over seeds (each seed's value in parentheses):\n\n"
            + "\n".join(lines) + "\n\n" + comparison_table(values, [m for m, _ in VALIDATION_METRICS], 3, rehearsal))
    return text, values


def evaluation_keys(plan: Plan) -> list[RunKey]:
    e = plan.study.evaluation
    return [RunKey(m.name, task_display_name(t), lr, seed) for m in all_evaluated_models(plan)
            for t in e.tasks for lr in e.lrs for seed in e.seeds]


def evaluation_results(plan: Plan) -> list[dict]:
    """The fine-tuning results of the plan's (model, task, LR, seed) runs that exist."""
    if plan.study.evaluation is None:
        return []
    return collect(Path(plan.root) / "eval", evaluation_keys(plan))


def evaluation_summaries(plan: Plan, results: list[dict] | None = None) -> list[TaskSummary]:
    if plan.study.evaluation is None:
        return []
    return summarize(evaluation_results(plan) if results is None else results, evaluation_keys(plan))


def finetuning_scores(results: list[dict], summaries: list[TaskSummary]) -> dict[tuple[str, str], list[float]]:
    """(model, task) -> its test scores over fine-tuning seeds at its selected LR."""
    best = {(s.model, s.task): s.best_lr for s in summaries}
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in results:
        if best.get((r["model"], r["task"])) == r["lr"]:
            scores[(r["model"], r["task"])].append(r["test"]["score"])
    return scores


def family_tables(summaries: list[TaskSummary]) -> str:
    parts = []
    for family in sorted({s.family for s in summaries}):
        rows = [s for s in summaries if s.family == family]
        table = markdown_table(rows).split("\n\nFamily averages")[0].rstrip("\n")
        parts.append(f"#### {family}\n\n{table}\n")
    return "\n".join(parts)


def arm_scores(plan: Plan, summaries: list[TaskSummary]) -> dict[tuple[str, str, int], list[float]]:
    """(arm, task, step) -> the test means of the arm's seeds (each at its model's best LR)."""
    by_model = {(s.model, s.task): s.test_mean for s in summaries}
    scores: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for arm in arms(plan):
        for run in arm.runs:
            for model in evaluated_models(plan, run):
                for task in {s.task for s in summaries}:
                    if (model.name, task) in by_model:
                        scores[(arm.label, task, model.step)].append(by_model[(model.name, task)])
    return scores


def downstream_section(plan: Plan, summaries: list[TaskSummary], results: list[dict] = (),
                       rehearsal: bool = False) -> tuple[str, dict]:
    scores = arm_scores(plan, summaries)
    by_model = finetuning_scores(list(results), summaries)
    final: dict[str, dict[str, Sample]] = {}
    lines = ["| arm | task | seeds | test (mean ± 95% CI over pretraining seeds) | per seed |", "|---|---|---|---|---|"]
    for arm in arms(plan):
        finals = [m.name for run in arm.runs for m in evaluated_models(plan, run) if m.step == run.train_iters]
        for task in sorted({s.task for s in summaries}):
            values = scores.get((arm.label, task, arm.runs[0].train_iters))
            if not values:
                continue
            finetuned = [by_model[(m, task)] for m in finals if by_model.get((m, task))]
            final.setdefault(arm.label, {})[task] = Sample(values, finetuned[0] if len(finetuned) == 1 else [])
            mean, ci = mean_confidence_interval(values)
            lines.append(f"| {arm.label} | {task} | {len(values)} | {_fmt(mean, ci, 2)} | "
                         f"{', '.join(f'{v:.2f}' for v in values)} |")
    tasks = sorted({s.task for s in summaries})
    text = ("Per arm (each seed's score is its model's test mean at the best LR):\n\n" + "\n".join(lines) + "\n\n"
            + comparison_table(final, tasks, 2, rehearsal))
    return text, scores


# ---- figures (matplotlib, optional) --------------------------------------------------------------------------


def figure_validation(plan: Plan, path: Path) -> Path | None:
    fig, axes = figs.figure(1, 3, figsize=(16, 4.2))
    colors = figs.colors()
    drawn = False
    for i, arm in enumerate(arms(plan)):
        for k, run in enumerate(arm.runs):
            if not any(r.get("kind") == "validation" for r in _metrics(plan, run)):
                continue  # not started: its curve would only repeat its parent's
            curve = drawn_curve(plan, run)
            drawn = True
            for ax, (metric, title) in zip(axes, VALIDATION_METRICS):
                points = [(r["step"], r[metric]) for r in curve if r.get(metric) is not None]
                ax.plot([p[0] for p in points], [p[1] for p in points], color=colors[i % len(colors)],
                        linestyle=("-", "--", ":", "-.")[k % 4], marker="o", markersize=2.5,
                        label=arm.label if k == 0 else None)
                ax.set(xlabel="step (continuations after their parent's last step)", title=title)
                ax.grid(alpha=0.3)
    if not drawn:
        figs.close(fig)
        return None
    axes[0].legend(fontsize=7)
    fig.suptitle("validation on held-out documents; one color per arm, one line style per seed", fontsize=9)
    return figs.save(fig, path)


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


def figure_score_vs_fraction(plan: Plan, scores: dict, tasks: list[str], path: Path) -> Path | None:
    fig, axes = figs.figure(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    drawn = False
    for ax, task in zip(axes[0], tasks):
        series: dict[tuple[int, float], list] = defaultdict(list)
        for arm in arms(plan):
            run = arm.runs[0]
            values = scores.get((arm.label, task, run.train_iters))
            if arm.clm_fraction is None or not values:
                continue
            mean, ci = mean_confidence_interval(values)
            series[(run.train_iters, run.mask_ratio)].append((arm.clm_fraction, mean, ci))
        for (budget, mask), points in sorted(series.items()):
            points.sort()
            drawn = True
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o",
                        capsize=3, label=f"{budget:,} steps, {round(mask * 100)}% masking")
        _score_axis(ax, [p for points in series.values() for p in points])
        ax.set(xlabel="CLM fraction of the budget", ylabel="test score (mean, 95% CI over seeds)", title=task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not drawn:
        figs.close(fig)
        return None
    return figs.save(fig, path)


def figure_score_vs_steps(plan: Plan, scores: dict, tasks: list[str], path: Path) -> Path | None:
    fig, axes = figs.figure(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    drawn = False
    for ax, task in zip(axes[0], tasks):
        shown: list[tuple] = []
        for arm in arms(plan):
            points = sorted((step, *mean_confidence_interval(v)) for (label, t, step), v in scores.items()
                            if label == arm.label and t == task)
            if len(points) < 2:
                continue
            drawn = True
            shown.extend(points)
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o",
                        capsize=3, label=arm.label)
        _score_axis(ax, shown)
        ax.set(xlabel="pretraining step", ylabel="test score (mean, 95% CI over seeds)", title=task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not drawn:
        figs.close(fig)
        return None
    return figs.save(fig, path)


def _panels(count: int):
    columns = min(4, count)
    rows = (count + columns - 1) // columns
    fig, axes = figs.figure(rows, columns, figsize=(4.4 * columns, 3.6 * rows), squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    return fig, list(axes.flat)


def figure_lr_sensitivity(curves: dict, families: list[str], path: Path) -> Path | None:
    """Score against the fine-tuning LR, one panel per task family, one line per arm (mean and 95% CI over its
    pretraining seeds); only where some arm was fine-tuned at 2 or more LRs."""
    shown = [f for f in families if any(len(arm.get(f, {})) >= 2 for arm in curves.values())]
    if not shown:
        return None
    fig, axes = _panels(len(shown))
    for ax, family in zip(axes, shown):
        points_all = []
        for label, by_family in curves.items():
            by_lr = by_family.get(family, {})
            if len(by_lr) < 2:
                continue
            points = [(lr, *mean_confidence_interval(v)) for lr, v in sorted(by_lr.items())]
            points_all += points
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o",
                        capsize=3, label=label)
        grid = sorted({p[0] for p in points_all})
        ax.set_xscale("log")
        ax.set_xticks(grid)
        ax.set_xticklabels([f"{lr:g}" for lr in grid], fontsize=7)
        ax.minorticks_off()
        _score_axis(ax, points_all)
        ax.set(xlabel="fine-tuning learning rate", ylabel="test score (mean, 95% CI over seeds)", title=family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("fine-tuning learning-rate sensitivity: each seed's model at every LR of the grid", fontsize=9)
    fig.tight_layout()
    return figs.save(fig, path)


def figure_stability(losses: dict, families: list[str], path: Path) -> Path | None:
    """Per arm and task family, the stability loss (test score at the best LR minus the mean at the grid's other
    LRs): mean and 95% CI over pretraining seeds; only where some arm has one."""
    labels = [label for label, by_family in losses.items() if by_family]
    shown = [f for f in families if any(f in losses[label] for label in labels)]
    if not shown:
        return None
    fig, ax = figs.figure(figsize=(max(5.0, 1.2 * len(labels) * len(shown) / 2 + 3), 3.8))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs, ys, errs = [], [], []
        for j, family in enumerate(shown):
            values = losses[label].get(family)
            if values:
                mean, ci = mean_confidence_interval(values)
                xs.append(j + (i - (len(labels) - 1) / 2) * width)
                ys.append(mean)
                errs.append(ci)
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=label)
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels(shown, fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel("score at best LR − mean at the other LRs")
    ax.set_title("fine-tuning stability (lower: less lost away from the best LR)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6)
    return figs.save(fig, path)


def figure_continuation_gain(continued: list, families: list[str], path: Path) -> Path | None:
    """Continued-pretraining gain (score minus the parent's final score, seed by seed) against continued steps,
    one panel per family, one line per parent arm and continuation objective; only where a continuation and its
    parent both have scores."""
    shown = [f for f in families if any(f in c.gains for c in continued)]
    if not shown:
        return None
    fig, axes = _panels(len(shown))
    series: dict[tuple[str, str], dict] = defaultdict(dict)
    for c in continued:
        key = (c.parent.label, c.arm.runs[0].objective)
        for family, points in c.gains.items():
            for step, values in points:
                series[key].setdefault(family, {})[step] = values
    for ax, family in zip(axes, shown):
        for (parent, objective), by_family in series.items():
            points = sorted(by_family.get(family, {}).items())
            if not points:
                continue
            stats = [(0, 0.0, 0.0)] + [(step, *mean_confidence_interval(v)) for step, v in points]
            ax.errorbar([p[0] for p in stats], [p[1] for p in stats], yerr=[p[2] for p in stats], marker="o",
                        capsize=3, label=f"{objective.upper()} from {parent}")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set(xlabel="continued-pretraining steps", ylabel="gain over the parent (95% CI over seeds)", title=family)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return figs.save(fig, path)


def time_section(plan: Plan) -> str:
    """Seconds per stage from the local runner's status files (absent for runs launched otherwise)."""
    totals: dict[str, float] = defaultdict(float)
    runs = 0
    for run in plan.runs:
        path = status_file(plan, run)
        if not path.is_file():
            continue
        seconds = json.loads(path.read_text()).get("seconds") or {}
        runs += bool(seconds)
        for stage, value in seconds.items():
            totals[stage] += value
    if not totals:
        return ""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    rows = "\n".join(f"| {stage} | {value / 60:.1f} |" for stage, value in totals.items())
    return (f"Wall time of the {runs} runs the local runner timed (`--run` of `tools/plan_study.py`), on "
            f"{os.cpu_count()} CPU cores ({platform.machine()}; load average {load} when this report was written):"
            f"\n\n| stage | minutes |\n|---|---:|\n{rows}\n| total | {sum(totals.values()) / 60:.1f} |\n")


def has_results(plan: Plan) -> bool:
    """Whether any run of the plan has written metrics or any fine-tuning result exists: something to report."""
    return any(_metrics(plan, run) for run in plan.runs) or bool(evaluation_summaries(plan))


def own_report_path(plan: Plan) -> Path:
    """Where the study's report goes: the study file's ``report`` (before any --set), else ROOT/report/REPORT.md
    under the study's default root."""
    study = plan.study
    return study.resolve(study.own_report) if study.own_report else Path(study.default_root) / "report" / "REPORT.md"


def _same_folder(a: Path, b: Path) -> bool:
    return a.parent.resolve() == b.parent.resolve()


def report_path(plan: Plan) -> Path:
    """The study's report path (the ``report`` key, else ROOT/report/REPORT.md); for a rehearsal (--scale < 1) a
    ``report`` given with --set away from the study's own report, else ROOT/rehearsal/REPORT.md."""
    study = plan.study
    if study.is_rehearsal:
        if study.report and not _same_folder(study.resolve(study.report), own_report_path(plan)):
            return study.resolve(study.report)
        return Path(plan.root) / "rehearsal" / "REPORT.md"
    return study.resolve(study.report) if study.report else Path(plan.root) / "report" / "REPORT.md"


def _shown(path: Path) -> str:
    """A path as a command from the repository root would write it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


REPORT_TITLE = "# Study `"
"""How every report this module writes begins: a file at the report's path that does not is someone else's."""


def check_report_target(path: Path, force: bool = False) -> None:
    """The report replaces an earlier report (it is rewritten from the runs at any time), never another file."""
    if path.is_dir():
        raise UserError(f"report path {path} is a folder; pass a file name (e.g. {path / 'REPORT.md'})")
    if path.exists() and not force:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(len(REPORT_TITLE))
        except OSError:
            head = ""
        if head != REPORT_TITLE:
            raise UserError(f"{path} exists and is not a study report; pass --force to replace it, or choose "
                            "another --output")


def write_report(plan: Plan, path: str | Path | None = None, figures: bool = True, force: bool = False) -> Path:
    """Write the report (and its figures into ``figures/`` beside it); returns its path. An existing file there that
    is not a report is refused unless ``force``."""
    path = Path(path) if path else report_path(plan)
    check_report_target(path, force)
    rehearsal = plan.study.is_rehearsal
    if rehearsal and _same_folder(path, own_report_path(plan)):
        raise UserError(f"a rehearsal (--scale {plan.study.scale:g}) does not write its report to {path}: that is "
                        f"the folder of the study's own report ({own_report_path(plan)}) and its figures; write it "
                        f"elsewhere (the default is {Path(plan.root) / 'rehearsal' / 'REPORT.md'})")
    results = evaluation_results(plan)
    summaries = evaluation_summaries(plan, results)
    validation_text, validation_values = validation_section(plan, rehearsal)
    downstream_text, arm_task_scores = (downstream_section(plan, summaries, results, rehearsal) if summaries
                                        else ("", {}))
    tasks = sorted({s.task for s in summaries})
    scores = Scores.of(results)
    claims_text = claims_section(plan, scores, rehearsal, validation_values) if summaries else ""
    images, note = [], ""
    if figures:
        if not figs.available():
            note = f"Figures left out: {figs.MISSING}.\n"
        else:
            folder = path.parent / "figures"
            made = [("validation curves", figure_validation(plan, folder / "validation.png"))]
            if tasks:
                made += [("score against the CLM fraction", figure_score_vs_fraction(
                             plan, arm_task_scores, tasks, folder / "score_vs_clm_fraction.png")),
                         ("score against pretraining steps", figure_score_vs_steps(
                             plan, arm_task_scores, tasks, folder / "score_vs_steps.png")),
                         ("score against the fine-tuning learning rate", figure_lr_sensitivity(
                             lr_curves(plan, scores), scores.families, folder / "lr_sensitivity.png")),
                         ("fine-tuning stability across learning rates", figure_stability(
                             stability(plan, scores), scores.families, folder / "lr_stability.png")),
                         ("continued-pretraining gain against continued steps", figure_continuation_gain(
                             continuation_gains(plan, scores), scores.families, folder / "continuation_gain.png"))]
            images = [(title, p) for title, p in made if p is not None]
    finished = sum(finished_step(plan.save_dir(r), r.train_iters) for r in plan.runs)
    study_file = _shown(plan.study.source)
    title = (f"{REPORT_TITLE}{plan.study.name}`: a rehearsal of the pipeline (`--scale {plan.study.scale:g}`), not its "
             "results" if rehearsal else f"{REPORT_TITLE}{plan.study.name}`: report")
    parts = [title, ""]
    if rehearsal:
        parts += [f"Every step count of the study was multiplied by {plan.study.scale:g}. This report shows that the "
                  "pipeline runs end to end and what it writes; its numbers answer none of the study's questions, so "
                  "it tests no difference between arms. The study's report comes from a run without `--scale`.", ""]
    scale = f" --scale {plan.study.scale:g}" if rehearsal else ""
    parts += [f"Written from the runs under `{plan.root}` (study file `{study_file}`) by `python tools/plan_study.py "
             f"{study_file}{scale} --run` at its end, or at any time by `python tools/study_report.py {study_file}"
             f"{scale}`. "
             f"{finished} of {len(plan.runs)} runs have finished.", "",
             "## The plan", "", plan_table(plan, throughput_for(plan.study)), "## Validation", "", validation_text]
    parts += [f"![{title}](figures/{p.name})\n" for title, p in images if p.name == "validation.png"]
    if summaries:
        parts += ["## Downstream", "", downstream_text, "### Per model, one table per task family", "",
                  "Best LR on validation, test mean ± 95% CI over fine-tuning seeds:", "", family_tables(summaries)]
        parts += [f"![{title}](figures/{p.name})\n" for title, p in images if p.name != "validation.png"]
    if claims_text:
        parts += ["## The paper's claims", "", claims_text]
    timing = time_section(plan)
    if timing:
        parts += ["## Time", "", timing]
    if note:
        parts.append(note)
    text = "\n".join(part for part in parts if part is not None)
    write_text_atomic(path, "\n".join(line.rstrip() for line in text.split("\n")).replace("\n\n\n", "\n\n") + "\n")
    if summaries:
        write_text_atomic(Path(plan.root) / "results.md", markdown_table(summaries))
    return path

