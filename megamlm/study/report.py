"""The study report (Markdown, figures beside it) from what exists under the study's root: the runs' metrics.jsonl
files and the fine-tuning results.

An *arm* is a run without its seed (``clm100-mlm100-m40``); its seeds are its replicates. For each arm: the
validation curves of every seed (a branch's curve is its parent's up to the branch step, then its own; a
continuation's follows its parent's last step), the final validation scores with their mean and 95% t-interval
over seeds, and which arms differ beyond the seed spread: the seeds' ranges of the two arms do not overlap (with
2 seeds a 95% t-interval is 12.7 standard errors wide, so the ranges are the useful comparison). Downstream: one
table per task family (best LR on validation per model, test mean and 95% CI over fine-tuning seeds), the arms'
scores over pretraining seeds, score against the CLM fraction per budget, and score against pretraining steps
from the evaluated intermediate checkpoints.
"""

from __future__ import annotations

import json
import os
import platform
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from megamlm import figures as figs  # `figures` is write_report's flag
from megamlm.eval.aggregate import TaskSummary, collect, summarize
from megamlm.eval.metrics import mean_confidence_interval
from megamlm.eval.registry import task_display_name
from megamlm.eval.report import markdown_table
from megamlm.eval.results import RunKey, write_text_atomic
from megamlm.errors import UserError
from megamlm.study.commands import REPO, all_evaluated_models, evaluated_models, status_file
from megamlm.study.cost import throughput_for
from megamlm.study.local import finished_step
from megamlm.study.plan import Plan, Run
from megamlm.study.table import plan_table
from megamlm.training.metrics_file import read_metrics

VALIDATION_METRICS = (("mlm_loss", "validation MLM loss"), ("mlm_accuracy", "validation MLM accuracy"),
                      ("clm_loss", "validation CLM loss"))


@dataclass
class Arm:
    label: str
    runs: list[Run]

    @property
    def clm_fraction(self) -> float | None:
        run = self.runs[0]
        if run.is_continuation:
            return None
        if run.switch_step is None:
            return 1.0 if run.objective == "clm" else 0.0
        return run.switch_step / run.train_iters


def arms(plan: Plan) -> list[Arm]:
    grouped: dict[str, list[Run]] = defaultdict(list)
    for run in plan.runs:
        grouped[f"{run.size}-{run.label}"].append(run)
    return [Arm(label, runs) for label, runs in grouped.items()]


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


def separated(a: list[float], b: list[float]) -> bool:
    """Whether two arms' seed values lie in disjoint ranges (at least 2 seeds each)."""
    return len(a) > 1 and len(b) > 1 and (max(a) < min(b) or max(b) < min(a))


def validation_section(plan: Plan) -> tuple[str, dict[str, dict[str, list[float]]]]:
    values: dict[str, dict[str, list[float]]] = {}
    lines = ["| arm | seeds | " + " | ".join(title for _, title in VALIDATION_METRICS) + " |",
             "|---|---|" + "---|" * len(VALIDATION_METRICS)]
    for arm in arms(plan):
        finals = [f for f in (final_validation(plan, run) for run in arm.runs) if f is not None]
        if not finals:
            continue
        values[arm.label] = {m: [f[m] for f in finals if f.get(m) is not None] for m, _ in VALIDATION_METRICS}
        cells = []
        for metric, _ in VALIDATION_METRICS:
            seeds = values[arm.label][metric]
            mean, ci = mean_confidence_interval(seeds)
            cells.append(f"{_fmt(mean, ci, 3)} ({', '.join(f'{v:.3f}' for v in seeds)})")
        lines.append(f"| {arm.label} | {len(finals)} | " + " | ".join(cells) + " |")
    if not values:
        return "No run has finished yet.\n", values
    text = ("Final validation scores: mean ± 95% t-interval over seeds (each seed's value in parentheses):\n\n"
            + "\n".join(lines) + "\n\n" + _separation_table(values, [m for m, _ in VALIDATION_METRICS], 3))
    return text, values


def _separation_table(values: dict[str, dict[str, list[float]]], metrics: list[str], digits: int) -> str:
    labels = list(values)
    rows = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            cells = []
            for metric in metrics:
                va, vb = values[a].get(metric, []), values[b].get(metric, [])
                if not va or not vb:
                    cells.append("–")
                    continue
                diff = sum(va) / len(va) - sum(vb) / len(vb)
                spread = "one seed" if min(len(va), len(vb)) < 2 else "**beyond**" if separated(va, vb) else "within"
                cells.append(f"{diff:+.{digits}f} {spread}")
            rows.append(f"| {a} − {b} | " + " | ".join(cells) + " |")
    if not rows:
        return ""
    beyond = [r.split(" |")[0].lstrip("| ") + f" ({m})" for r in rows for m, cell in zip(metrics, r.split(" | ")[1:])
              if "**beyond**" in cell]
    summary = ("Beyond the seed spread: " + ("; ".join(beyond) if beyond else "none") + ". Every other difference "
               "below lies within it (or has one seed, which measures no spread). Disjoint ranges of 2 seeds are "
               "weak evidence for a difference much smaller than the 95% intervals above.\n\n")
    return summary + ("Differences between arms (mean of A − mean of B); **beyond** = the seeds' ranges do not overlap, "
            "within = they do (not distinguishable from seed variation at this number of seeds), one seed = no spread to compare with:\n\n"
            "| A − B | " + " | ".join(metrics) + " |\n|---|" + "---|" * len(metrics) + "\n" + "\n".join(rows) + "\n")


def evaluation_keys(plan: Plan) -> list[RunKey]:
    e = plan.study.evaluation
    return [RunKey(m.name, task_display_name(t), lr, seed) for m in all_evaluated_models(plan)
            for t in e.tasks for lr in e.lrs for seed in e.seeds]


def evaluation_summaries(plan: Plan) -> list[TaskSummary]:
    if plan.study.evaluation is None:
        return []
    keys = evaluation_keys(plan)
    return summarize(collect(Path(plan.root) / "eval", keys), keys)


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


def downstream_section(plan: Plan, summaries: list[TaskSummary]) -> tuple[str, dict]:
    scores = arm_scores(plan, summaries)
    final = {}
    lines = ["| arm | task | seeds | test (mean ± 95% CI over pretraining seeds) | per seed |", "|---|---|---|---|---|"]
    for arm in arms(plan):
        for task in sorted({s.task for s in summaries}):
            values = scores.get((arm.label, task, arm.runs[0].train_iters))
            if not values:
                continue
            final.setdefault(arm.label, {})[task] = values
            mean, ci = mean_confidence_interval(values)
            lines.append(f"| {arm.label} | {task} | {len(values)} | {_fmt(mean, ci, 2)} | "
                         f"{', '.join(f'{v:.2f}' for v in values)} |")
    tasks = sorted({s.task for s in summaries})
    text = ("Per arm (each seed's score is its model's test mean at the best LR):\n\n" + "\n".join(lines) + "\n\n"
            + _separation_table(final, tasks, 2))
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


def report_path(plan: Plan) -> Path:
    study = plan.study
    return study.resolve(study.report) if study.report else Path(plan.root) / "report" / "REPORT.md"


def _shown(path: Path) -> str:
    """A path as a command from the repository root would write it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def write_report(plan: Plan, path: str | Path | None = None, figures: bool = True) -> Path:
    """Write the report (and its figures into ``figures/`` beside it); returns its path."""
    path = Path(path) if path else report_path(plan)
    summaries = evaluation_summaries(plan)
    validation_text, _ = validation_section(plan)
    downstream_text, scores = downstream_section(plan, summaries) if summaries else ("", {})
    tasks = sorted({s.task for s in summaries})
    images, note = [], ""
    if figures:
        if not figs.available():
            note = f"Figures left out: {figs.MISSING}.\n"
        else:
            folder = path.parent / "figures"
            made = [("validation curves", figure_validation(plan, folder / "validation.png"))]
            if tasks:
                made += [("score against the CLM fraction", figure_score_vs_fraction(
                             plan, scores, tasks, folder / "score_vs_clm_fraction.png")),
                         ("score against pretraining steps", figure_score_vs_steps(
                             plan, scores, tasks, folder / "score_vs_steps.png"))]
            images = [(title, p) for title, p in made if p is not None]
    finished = sum(finished_step(plan.save_dir(r), r.train_iters) for r in plan.runs)
    study_file = _shown(plan.study.source)
    parts = [f"# Study `{plan.study.name}`: report", "",
             f"Written from the runs under `{plan.root}` (study file `{study_file}`) by `python tools/plan_study.py "
             f"{study_file} --run` at its end, or at any time by `python tools/study_report.py {study_file}`. "
             f"{finished} of {len(plan.runs)} runs have finished.", "",
             "## The plan", "", plan_table(plan, throughput_for(plan.study)), "## Validation", "", validation_text]
    parts += [f"![{title}](figures/{p.name})\n" for title, p in images if p.name == "validation.png"]
    if summaries:
        parts += ["## Downstream", "", downstream_text, "### Per model, one table per task family", "",
                  "Best LR on validation, test mean ± 95% CI over fine-tuning seeds:", "", family_tables(summaries)]
        parts += [f"![{title}](figures/{p.name})\n" for title, p in images if p.name != "validation.png"]
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

