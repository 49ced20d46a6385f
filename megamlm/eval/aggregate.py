"""From run results to the paper's numbers: per (model, task) the LR with the best mean validation
score over seeds, and at that LR the test mean with its 95% t-interval over seeds; family averages.

LRs whose validation means tie at the best (within ``TIE_TOLERANCE``) are resolved by a tie rule, declared here
once for every table and every claim: the smaller LR (the default), the larger, or the mean over the tied LRs
(each fine-tuning seed's test score averaged over them)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from megamlm.eval.metrics import mean_confidence_interval
from megamlm.eval.results import RunKey, read_result

TieRule = Literal["smaller", "larger", "mean"]
TIE_RULES: tuple[str, ...] = get_args(TieRule)
TIE_TOLERANCE = 1e-9
"""Validation means this close are tied (scores are percentages of a few hundred examples: exact ties happen)."""


def tied_at_best(validation: dict[float, float]) -> list[float]:
    """The LRs of ``validation`` (LR -> validation mean) within ``TIE_TOLERANCE`` of the best, smallest first."""
    if not validation:
        return []
    top = max(validation.values())
    return sorted(lr for lr, value in validation.items() if value >= top - TIE_TOLERANCE)


def choose_lrs(validation: dict[float, float], tie_rule: str = "smaller") -> list[float]:
    """The LRs a score is read at under ``tie_rule``: one, or (``mean``) every LR tied at the best."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie rule {tie_rule!r}: use one of {', '.join(TIE_RULES)}")
    tied = tied_at_best(validation)
    if tie_rule == "mean" or not tied:
        return tied
    return [tied[0] if tie_rule == "smaller" else tied[-1]]


@dataclass
class LrScores:
    model: str
    task: str
    lr: float
    seeds: int
    validation_mean: float
    validation_ci: float
    test_mean: float
    test_ci: float


@dataclass
class TaskSummary:
    model: str
    task: str
    family: str
    metric: str
    best_lr: float
    seeds: int
    validation_mean: float
    test_mean: float
    test_ci: float
    runs: int
    planned_runs: int
    diverged_runs: int
    chosen_lrs: tuple[float, ...] = ()
    """The LRs its scores are read at under the tie rule (``best_lr`` is the smallest of them)."""


def collect(output: Path, keys: list[RunKey]) -> list[dict]:
    return [r for r in (read_result(output / k.relative_path()) for k in keys) if r is not None]


def per_lr(results: list[dict]) -> list[LrScores]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["model"], r["task"], r["lr"])].append(r)
    rows = []
    for (model, task, lr), runs in sorted(groups.items()):
        val = mean_confidence_interval([r["validation"]["score"] for r in runs])
        test = mean_confidence_interval([r["test"]["score"] for r in runs])
        rows.append(LrScores(model, task, lr, len(runs), val[0], val[1], test[0], test[1]))
    return rows


def seed_scores_at(runs: list[dict], lrs: list[float]) -> dict[int, float]:
    """Fine-tuning seed -> its test score, averaged over ``lrs`` (one LR: its score there)."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        if r["lr"] in lrs:
            by_seed[r["seed"]].append(r["test"]["score"])
    return {seed: sum(values) / len(values) for seed, values in sorted(by_seed.items())}


def summarize(results: list[dict], planned: list[RunKey], tie_rule: str = "smaller") -> list[TaskSummary]:
    """Best LR by mean validation score (ties resolved by ``tie_rule``) and the test mean +- CI over fine-tuning
    seeds there (under ``mean``, each seed's score averaged over the tied LRs)."""
    lr_rows = per_lr(results)
    by_task: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        by_task[(r["model"], r["task"])].append(r)
    planned_count: dict[tuple, int] = defaultdict(int)
    for k in planned:
        planned_count[(k.model, k.task)] += 1
    summaries = []
    for (model, task), runs in sorted(by_task.items()):
        validation = {row.lr: row.validation_mean for row in lr_rows if row.model == model and row.task == task}
        chosen = choose_lrs(validation, tie_rule)
        seed_scores = list(seed_scores_at(runs, chosen).values())
        test_mean, test_ci = mean_confidence_interval(seed_scores)
        summaries.append(TaskSummary(
            model, task, runs[0]["family"], runs[0]["metric"], chosen[0], len(seed_scores),
            sum(validation[lr] for lr in chosen) / len(chosen), test_mean, test_ci, len(runs),
            planned_count[(model, task)], sum(r.get("diverged_at_step") is not None for r in runs), tuple(chosen)))
    return summaries


def family_averages(summaries: list[TaskSummary]) -> dict[tuple[str, str], float]:
    """Mean test score over the tasks of each family, per model (an unweighted mean of task means)."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for s in summaries:
        groups[(s.model, s.family)].append(s.test_mean)
    return {key: sum(v) / len(v) for key, v in groups.items()}
