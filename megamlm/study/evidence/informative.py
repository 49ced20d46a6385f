"""Which tasks can say anything about pretraining: a task is *informative* when some arm beats the random-init model
of its size (the same shape and tokenizer with fresh weights, fine-tuned with the same protocol); otherwise it
measures the fine-tuning, not the pretraining, and is left out of the claims.

The test, per task: for every arm with final models, a one-sided Welch t-test of H1 "the arm's mean is above the
random-init model's" with the arm's values (one per pretraining seed: its model's test mean at its best LR; with a
single pretraining seed, that model's test scores over fine-tuning seeds, as the report's comparisons) against the
random-init model's test scores over fine-tuning seeds at its best LR. The one-sided p-value is half the two-sided
Welch p when the arm's mean is higher, else one minus that half (``metrics.welch``: scipy's ``ttest_ind``,
unequal variances). The arms' p-values of one task are Holm-adjusted together; the task is informative when the
smallest adjusted p is below the report's level (``metrics.SIGNIFICANCE``, 0.05). A task without a random-init
score, or where no arm can be tested (fewer than 2 values on a side, or no spread at all), is *not shown
informative* (``tested`` False) and is no more fit for a claim than an uninformative one.

Welch rather than a pooled test because the two sides are different kinds of replicate (pretraining seeds against
fine-tuning seeds) with no reason for equal variances; one-sided because only "better than random" makes a task
informative; Holm because the task counts as informative if any of several arms passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megamlm.eval.metrics import SIGNIFICANCE, holm, welch
from megamlm.study.evidence.claims import Evidence
from megamlm.study.evidence.scores import Scores, models_at
from megamlm.study.planning.arms import arms
from megamlm.study.planning.plan import Plan
from megamlm.study.running.commands import random_init_models, random_init_name


@dataclass(frozen=True)
class TaskEvidence:
    task: str
    informative: bool
    tested: bool
    """False where no arm could be tested against a random-init model (then not informative either)."""
    reason: str
    """One sentence: the arm that beats the random-init model and its adjusted p, or why none does."""


def best_lr_scores(scores: Scores, model: str, task: str) -> list[float]:
    """The model's test scores over fine-tuning seeds at its best LR on the task."""
    lr = scores.best_lr(model, task)
    return [] if lr is None else [v for _, v in sorted(scores.seeds.get((model, task, lr), {}).items())]


def arm_values(plan: Plan, scores: Scores, task: str) -> dict[str, tuple[str, list[float]]]:
    """arm -> (its size, its final values on the task: one per pretraining seed, or one model's fine-tuning seeds)."""
    out = {}
    for arm in arms(plan):
        models = [m for _, m in models_at(plan, arm)]
        values = []
        for model in models:
            lr = scores.best_lr(model, task)
            if lr is not None:
                values.append(scores.by_lr[model][task][lr][1])
        if len(values) == 1:
            values = best_lr_scores(scores, models[0], task)
        if values:
            out[arm.label] = (arm.runs[0].size, values)
    return out


def _one_sided(a: list[float], b: list[float]) -> float:
    """p of H1 mean(a) > mean(b) by Welch's t-test; NaN where it cannot be made."""
    difference, _, _, p = welch(a, b)
    if math.isnan(p):
        return math.nan
    return p / 2 if difference > 0 else 1 - p / 2


def task_evidence(plan: Plan, results: list[dict], level: float = SIGNIFICANCE) -> dict[str, TaskEvidence]:
    """Per task of the results, whether it is informative (module docstring), and why."""
    scores = Scores.of(results)
    references = set(random_init_models(plan).values())
    out = {}
    for task in sorted(scores.family_of):
        reference = {size: best_lr_scores(scores, random_init_name(size), task)
                     for size in {run.size for run in plan.runs} if random_init_name(size) in references}
        candidates = {arm: (size, values) for arm, (size, values) in arm_values(plan, scores, task).items()
                      if reference.get(size)}
        if not candidates:
            out[task] = TaskEvidence(task, False, False, "no random-init model of the arms' size has scores on it "
                                     "(the study evaluates one per size with --random-init-baseline)")
            continue
        names = list(candidates)
        p = [_one_sided(candidates[a][1], reference[candidates[a][0]]) for a in names]
        adjusted = holm(p)
        tested = [i for i, q in enumerate(adjusted) if not math.isnan(q)]
        if not tested:
            out[task] = TaskEvidence(task, False, False, "no arm can be tested against the random-init model "
                                     "(fewer than 2 values on a side, or no spread)")
            continue
        best = min(tested, key=lambda i: adjusted[i])
        arm, (size, values) = names[best], candidates[names[best]]
        ref = reference[size]
        detail = (f"{arm} {sum(values) / len(values):.2f} vs {random_init_name(size)} {sum(ref) / len(ref):.2f}, "
                  f"one-sided Welch, Holm over {len(tested)} arms: adjusted p = {adjusted[best]:.3g}")
        if adjusted[best] < level:
            out[task] = TaskEvidence(task, True, True, f"beats random init ({detail})")
        else:
            out[task] = TaskEvidence(task, False, True, f"no arm beats random init at adjusted p < {level:g} "
                                     f"(closest: {detail})")
    return out


def informative_tasks(plan: Plan, results: list[dict], level: float = SIGNIFICANCE) -> set[str]:
    """The tasks an arm is shown to beat the random-init model on: the only tasks fit for the claims."""
    return {task for task, evidence in task_evidence(plan, results, level).items() if evidence.informative}


def claim_evidence(plan: Plan, results: list[dict], level: float = SIGNIFICANCE) -> Evidence:
    """What the claims take from the baselines: the tasks not shown informative (left out of every claim test, each
    with its reason) and each task's random-init score (test mean at its best LR), the stability claim's reference.
    A study of several sizes has one random-init model per size, and the claims' measure takes one per task: there
    the reference is left out and the stability claim says it is not testable."""
    evidence = task_evidence(plan, results, level)
    excluded = {task: e.reason for task, e in evidence.items() if not e.informative}
    references = sorted(set(random_init_models(plan).values()))
    if len(references) != 1:
        return Evidence(excluded=excluded)
    scores = Scores.of(results)
    random_init = {}
    for task in evidence:
        values = best_lr_scores(scores, references[0], task)
        if values:
            random_init[task] = sum(values) / len(values)
    return Evidence(excluded=excluded, random_init=random_init)
