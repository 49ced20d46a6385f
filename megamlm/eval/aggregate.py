"""From run results to the paper's numbers: per (model, task) the LR with the best mean validation
score over seeds, and at that LR the test mean with its 95% t-interval over seeds; family averages."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from megamlm.eval.metrics import mean_confidence_interval
from megamlm.eval.results import RunKey, read_result


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


def summarize(results: list[dict], planned: list[RunKey]) -> list[TaskSummary]:
    """Best LR by mean validation score (ties go to the smaller LR) and its test mean +- CI."""
    lr_rows = per_lr(results)
    by_task: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        by_task[(r["model"], r["task"])].append(r)
    planned_count: dict[tuple, int] = defaultdict(int)
    for k in planned:
        planned_count[(k.model, k.task)] += 1
    summaries = []
    for (model, task), runs in sorted(by_task.items()):
        candidates = [row for row in lr_rows if row.model == model and row.task == task]
        best = max(candidates, key=lambda row: (row.validation_mean, -row.lr))
        summaries.append(TaskSummary(
            model, task, runs[0]["family"], runs[0]["metric"], best.lr, best.seeds, best.validation_mean,
            best.test_mean, best.test_ci, len(runs), planned_count[(model, task)],
            sum(r.get("diverged_at_step") is not None for r in runs)))
    return summaries


def family_averages(summaries: list[TaskSummary]) -> dict[tuple[str, str], float]:
    """Mean test score over the tasks of each family, per model (an unweighted mean of task means)."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for s in summaries:
        groups[(s.model, s.family)].append(s.test_mean)
    return {key: sum(v) / len(v) for key, v in groups.items()}
