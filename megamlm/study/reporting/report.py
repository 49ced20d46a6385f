"""The study report (Markdown, figures beside it) from what exists under the study's root: the runs' metrics.jsonl
files and the fine-tuning results.

An *arm* is a run without its seed (``clm100-mlm100-m40``); its seeds are its replicates. For each arm: the
validation curves of every seed (a branch's curve is its parent's up to the branch step, then its own; a
continuation's follows its parent's last step), the final validation scores with their mean and 95% t-interval
over seeds, and the differences between arms, descriptive: the difference with its unadjusted 95%
Welch-Satterthwaite interval and the unadjusted p-value of Welch's two-sided t-test over pretraining seeds (where
both arms have a single pretraining seed, as in the paper, over the fine-tuning seeds at each model's selected LR,
and the table says which), nothing called significant; fewer than 2 values in an arm: n/a.
Downstream: one table per task family (best LR on validation per model, test mean and 95% CI over fine-tuning
seeds), the arms' scores over pretraining seeds, score against the CLM fraction per budget, score against
pretraining steps from the evaluated intermediate checkpoints, each task's baselines beside the arms (each
size's random-init model, fine-tuned with the same protocol, and the trivial baselines computed without training)
and its informative/uninformative mark (``informative.py``: on validation, some arm above both the random-init
model and the best trivial baseline by the study file's margin), every model's scores per LR (``lr_grid.py``),
arms of a single pretraining seed compared on the same test examples (``paired_text.py``), and (``scores.py``)
the paper's other figures,
each only where the study has its data: score against the fine-tuning LR per arm and task family and the
stability loss per arm (both need 2 or more LRs), the continued-pretraining gain against continued steps from
each parent; then a section answering the paper's claims (a)-(e), one pre-registered permutation test per claim
with Holm's correction over the claims (``decision.py``).

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
from megamlm.eval.aggregate import TaskSummary, collect, seed_scores_at, summarize
from megamlm.eval.baseline_store import BaselineRow, read_baselines
from megamlm.eval.metrics import mean_confidence_interval
from megamlm.eval.registry import task_display_name
from megamlm.eval.report import markdown_table
from megamlm.eval.results import RunKey, write_text_atomic
from megamlm.study.evidence.informative import claim_evidence, rule_text, task_evidence
from megamlm.study.evidence.scores import Scores
from megamlm.study.evidence.statistics import Sample, comparison_table, fmt_mean
from megamlm.study.planning.arms import arms
from megamlm.study.planning.cost import throughput_for
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.table import plan_table
from megamlm.study.reporting.claims_text import claims_section
from megamlm.study.reporting.curves import final_validation, run_metrics, validation_metrics
from megamlm.study.reporting.figure_data import draw_figures
from megamlm.study.reporting.lr_grid import lr_grid_section
from megamlm.study.reporting.paired_text import paired_section
from megamlm.study.reporting.plateau import plateau_section
from megamlm.study.reporting.registration import registration_section
from megamlm.study.reporting.report_target import (
    REPORT_TITLE,
    check_rehearsal_target,
    check_report_target,
    report_path,
    shown_path,
)
from megamlm.study.running.commands import all_evaluated_models, evaluated_models, random_init_models, status_file
from megamlm.study.running.local import finished_step


def validation_section(plan: Plan, rehearsal: bool = False) -> tuple[str, dict[str, dict[str, Sample]]]:
    values: dict[str, dict[str, Sample]] = {}
    metrics = validation_metrics(plan)  # each phase's objective: MNTP's loss where a phase trains it
    lines = ["| arm | phases | seeds | " + " | ".join(title for _, title in metrics) + " |",
             "|---|---|---|" + "---|" * len(metrics)]
    for arm in arms(plan):
        finals = [f for f in (final_validation(plan, run) for run in arm.runs) if f is not None]
        if not finals:
            continue
        values[arm.label] = {m: Sample([f[m] for f in finals if f.get(m) is not None]) for m, _ in metrics}
        cells = []
        for metric, _ in metrics:
            seeds = values[arm.label][metric].pretraining
            if not seeds:
                cells.append("–")
                continue
            mean, ci = mean_confidence_interval(seeds)
            cells.append(f"{fmt_mean(mean, ci, 3)} ({', '.join(f'{v:.3f}' for v in seeds)})")
        lines.append(f"| {arm.label} | {' -> '.join(arm.runs[0].phases)} | {len(finals)} | " + " | ".join(cells)
                     + " |")
    if not values:
        return "No run has finished yet.\n", values
    text = ("Final validation scores: mean ± 95% t-interval over seeds (each seed's value in parentheses):\n\n"
            + "\n".join(lines) + "\n\n" + comparison_table(values, [m for m, _ in metrics], 3, rehearsal))
    return text, values


def evaluation_keys(plan: Plan) -> list[RunKey]:
    """The (model, task, LR, seed) runs of the study: every evaluated model's, and each size's random-init model's."""
    e = plan.study.evaluation
    seeds = {m.name: e.seeds for m in all_evaluated_models(plan)}
    seeds.update({name: e.random_init_seeds or e.seeds for name in random_init_models(plan).values()})
    return [RunKey(m, task_display_name(t), lr, seed) for m, model_seeds in seeds.items() for t in e.tasks
            for lr in e.lrs for seed in model_seeds]


def completeness(plan: Plan, unfinished: list[str], results: list[dict]) -> str:
    """What the report holds and what is missing from it: the runs that have not finished, and the fine-tuning
    runs without a result (a failed or cancelled evaluation job, or one still to run), named by model."""
    runs = len(plan.runs)
    text = f"{runs - len(unfinished)} of {runs} runs have finished."
    if unfinished:
        text += f" Not finished: {', '.join(unfinished)}."
    if plan.study.evaluation is None:
        return text
    keys = evaluation_keys(plan)
    found = {(r["model"], r["task"], r["lr"], r["seed"]) for r in results}
    missing = [k for k in keys if (k.model, k.task, k.lr, k.seed) not in found]
    if not missing:
        return text + f" Every one of the {len(keys)} fine-tuning runs has its result."
    models = list(dict.fromkeys(k.model for k in missing))
    text += (f" **Evaluations missing: {len(missing)} of the {len(keys)} fine-tuning runs have no result**, of "
             f"{', '.join(models)} (their evaluation jobs failed, were cancelled or have not run: see "
             f"`{Path(plan.root) / 'logs'}`)")
    return text + (", so the report has no downstream results and no claims." if len(missing) == len(keys)
                   else "; the downstream results and claims below leave them out.")


def evaluation_baselines(plan: Plan) -> list[BaselineRow]:
    """The tasks' trivial baselines, as the evaluation of one run per size stored them."""
    if plan.study.evaluation is None:
        return []
    return read_baselines(Path(plan.root) / "eval", [task_display_name(t) for t in plan.study.evaluation.tasks])


def evaluation_results(plan: Plan) -> list[dict]:
    """The fine-tuning results of the plan's (model, task, LR, seed) runs that exist."""
    if plan.study.evaluation is None:
        return []
    return collect(Path(plan.root) / "eval", evaluation_keys(plan))


def evaluation_summaries(plan: Plan, results: list[dict] | None = None) -> list[TaskSummary]:
    if plan.study.evaluation is None:
        return []
    return summarize(evaluation_results(plan) if results is None else results, evaluation_keys(plan),
                     plan.study.evaluation.tie_rule)


def finetuning_scores(results: list[dict], summaries: list[TaskSummary]) -> dict[tuple[str, str], list[float]]:
    """(model, task) -> its test scores over fine-tuning seeds at the LRs the tie rule selected (under ``mean``
    each seed's score averaged over the tied LRs)."""
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        runs[(r["model"], r["task"])].append(r)
    return {(s.model, s.task): list(seed_scores_at(runs[(s.model, s.task)], list(s.chosen_lrs)).values())
            for s in summaries if runs[(s.model, s.task)]}


def family_tables(summaries: list[TaskSummary], baselines: list[BaselineRow] = ()) -> str:
    parts = []
    for family in sorted({s.family for s in summaries}):
        rows = [s for s in summaries if s.family == family]
        table = markdown_table(rows, [b for b in baselines if b.family == family]).split("\n\nFamily averages")[0]
        table = table.rstrip("\n")
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
            lines.append(f"| {arm.label} | {task} | {len(values)} | {fmt_mean(mean, ci, 2)} | "
                         f"{', '.join(f'{v:.2f}' for v in values)} |")
    tasks = sorted({s.task for s in summaries})
    lines += baseline_rows(plan, tasks, by_model)
    text = ("Per arm (each seed's score is its model's test mean at the best LR), and beside them the baselines: "
            "each size's random-init model (its fine-tuning seeds at its best LR) and the trivial baselines "
            "(no training):\n\n" + "\n".join(lines) + "\n\n" + comparison_table(final, tasks, 2, rehearsal))
    return text, scores


def baseline_rows(plan: Plan, tasks: list[str], by_model: dict[tuple[str, str], list[float]]) -> list[str]:
    """Rows of the per-arm table for the random-init models and the trivial baselines of ``tasks``."""
    lines = []
    for name in sorted(set(random_init_models(plan).values())):
        for task in tasks:
            values = by_model.get((name, task))
            if values:
                mean, ci = mean_confidence_interval(values)
                lines.append(f"| {name} | {task} | {len(values)} fine-tuning | {fmt_mean(mean, ci, 2)} | "
                             f"{', '.join(f'{v:.2f}' for v in values)} |")
    for b in evaluation_baselines(plan):
        if b.task in tasks:
            lines.append(f"| {b.model} | {b.task} | – | {b.test:.2f} (no training) | – |")
    return lines


def informative_section(plan: Plan, results: list[dict], rehearsal: bool) -> str:
    """The informative/uninformative mark of every task (study/evidence/informative.py), uninformative tasks named."""
    if rehearsal:
        return "A rehearsal tests nothing: no task is marked informative or uninformative.\n"
    evidence = task_evidence(plan, results, evaluation_baselines(plan))
    marks = {(True, True): "informative", (False, True): "uninformative", (False, False): "not tested"}
    lines = [f"- **{e.task}**: {marks[(e.informative, e.tested)]}: {e.reason}." for e in evidence.values()]
    left_out = [e.task for e in evidence.values() if not e.informative]
    named = (f"Not shown informative, so left out of the claims: {', '.join(left_out)}." if left_out
             else "Every task is informative.")
    return rule_text(plan) + "\n\n" + "\n".join(lines) + f"\n\n{named}\n"


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
    return any(run_metrics(plan, run) for run in plan.runs) or bool(evaluation_summaries(plan))


def write_report(plan: Plan, path: str | Path | None = None, figures: bool = True, force: bool = False) -> Path:
    """Write the report (and its figures into ``figures/`` beside it); returns its path. An existing file there that
    is not a report is refused unless ``force``."""
    path = Path(path) if path else report_path(plan)
    check_report_target(path, force)
    check_rehearsal_target(plan, path)
    rehearsal = plan.study.is_rehearsal
    results = evaluation_results(plan)
    summaries = evaluation_summaries(plan, results)
    validation_text, validation_values = validation_section(plan, rehearsal)
    downstream_text, arm_task_scores = (downstream_section(plan, summaries, results, rehearsal) if summaries
                                        else ("", {}))
    tasks = sorted({s.task for s in summaries})
    scores = Scores.of(results, plan.study.evaluation.tie_rule if plan.study.evaluation else "smaller")
    claims_text = (claims_section(plan, scores, rehearsal, validation_values,
                                  None if rehearsal else claim_evidence(plan, results, evaluation_baselines(plan)))
                   if summaries else "")
    images, note = [], ""
    if figures:
        if not figs.available():
            note = f"Figures left out: {figs.MISSING}.\n"
        else:
            images = draw_figures(plan, path.parent / "figures", arm_task_scores, tasks, scores)
    unfinished = [r.name for r in plan.runs if not finished_step(plan.save_dir(r), r.train_iters)]
    study_file = shown_path(plan.study.source)
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
             f"{completeness(plan, unfinished, results)}", "",
             "## What was fixed before the run", "", registration_section(plan),
             "## The plan", "", plan_table(plan, throughput_for(plan.study)), "## Validation", "", validation_text,
             plateau_section(plan, validation_values)]
    parts += [f"![{title}](figures/{p.name})\n" for title, p in images if p.name == "validation.png"]
    if summaries:
        parts += ["## Downstream", "", downstream_text, "### Per model, one table per task family", "",
                  f"Best LR on validation (LRs tied there resolved by the study's tie rule, "
                  f"`{plan.study.evaluation.tie_rule}`; under `mean` every tied LR is listed and each fine-tuning "
                  "seed's score is averaged over them), test mean ± 95% CI over fine-tuning seeds; each size's "
                  "random-init model "
                  "(`random-init-SIZE`) and the trivial baselines (`baseline:NAME`, no training) beside the models:",
                  "", family_tables(summaries, evaluation_baselines(plan)),
                  "### Informative tasks", "", informative_section(plan, results, rehearsal)]
        grid = lr_grid_section(scores)
        if grid:
            parts += ["### Scores per learning rate", "", grid]
        parts.append(paired_section(plan, summaries, rehearsal))
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
        write_text_atomic(Path(plan.root) / "results.md", markdown_table(summaries, evaluation_baselines(plan)))
    return path

