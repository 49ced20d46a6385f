"""Which tasks can say anything about pretraining, decided on validation scores before any test score is read: a
task is *informative* when some arm beats both the random-init model of its size (the same shape and tokenizer
with fresh weights, fine-tuned with the same protocol) and the task's best trivial baseline (the best of its
no-training rules: majority label, per-word tag, QA rule extractors, TF-IDF; ``eval/baselines.py``) by more than
the study file's margin (``evaluation.informative_margin``, score points). Otherwise it measures the fine-tuning or
a surface cue, not the pretraining, and is left out of the claims.

The rule, per task, on validation only: a model's value is its mean validation score over fine-tuning seeds at
its best LR (by that same validation mean; ties go to the smaller LR); an arm's value is the mean of its final
models' values over its pretraining seeds; the random-init model's is its value the same way; a trivial
baseline's is its validation score. Informative: the best arm's value > max(random-init, best trivial baseline) +
margin. A task without a random-init score or without trivial baselines is *not tested* (``tested`` False) and
is no more fit for a claim than an uninformative one.

Why validation and a margin, not a test of test scores: the claims test the test scores, and choosing the tasks
on those same scores makes the claims' tests conditional on a selection that looked at them (a task kept because
the arms happened to score high on test keeps that luck in the claim). Validation scores are what the best LR is
chosen on anyway, and the margin states in advance how far above the floor a task must be. Why the best trivial
baseline and not one: a task a lexical rule solves better than every arm (the POS tagger's per-word tag, the QA
speaker rules, TF-IDF retrieval) measures that rule's cue, whatever random init scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from megamlm.eval.baseline_store import BaselineRow
from megamlm.study.evidence.claims import Evidence
from megamlm.study.evidence.rules import informative_text
from megamlm.study.evidence.scores import models_at
from megamlm.study.planning.arms import arms
from megamlm.study.planning.plan import Plan
from megamlm.study.running.commands import random_init_models, random_init_name


@dataclass(frozen=True)
class TaskEvidence:
    task: str
    informative: bool
    tested: bool
    """False where the task lacks a reference (a random-init score, trivial baselines) or any arm's score."""
    reason: str
    """One sentence: the arm that clears the margin and by how much, or why none does."""


def validation_values(results: Iterable[dict]) -> dict[tuple[str, str], float]:
    """(model, task) -> its mean validation score over fine-tuning seeds at its best LR by that mean (ties: the
    smaller LR). Reads each result's model, task, LR and validation score, and nothing else: no test score."""
    per_lr: dict[tuple[str, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        per_lr[(r["model"], r["task"])][r["lr"]].append(r["validation"]["score"])
    out = {}
    for key, lrs in per_lr.items():
        means = {lr: sum(v) / len(v) for lr, v in lrs.items()}
        out[key] = means[max(means, key=lambda lr: (means[lr], -lr))]
    return out


def task_evidence(plan: Plan, results: list[dict], baselines: list[BaselineRow],
                  margin: float | None = None) -> dict[str, TaskEvidence]:
    """Per task of the results, whether it is informative (module docstring), and why; ``margin`` defaults to the
    study file's ``evaluation.informative_margin``."""
    margin = plan.study.evaluation.informative_margin if margin is None else margin
    values = validation_values(results)
    sizes = {run.size for run in plan.runs}
    chosen = set(random_init_models(plan).values())
    out = {}
    for task in sorted({r["task"] for r in results}):
        trivial = [b for b in baselines if b.task == task]
        reference = {size: values.get((random_init_name(size), task)) for size in sizes
                     if random_init_name(size) in chosen}
        arm_values = {}
        for arm in arms(plan):
            found = [values[(m, task)] for _, m in models_at(plan, arm) if (m, task) in values]
            if found and reference.get(arm.runs[0].size) is not None:
                arm_values[arm.label] = (arm.runs[0].size, sum(found) / len(found))
        if not trivial:
            out[task] = TaskEvidence(task, False, False, "no trivial baseline was computed for it (the study's "
                                     "evaluation stores them with --random-init-baseline)")
            continue
        if not arm_values:
            out[task] = TaskEvidence(task, False, False, "no random-init model of the arms' size has validation "
                                     "scores on it (the study evaluates one per size with --random-init-baseline)")
            continue
        best_trivial = max(trivial, key=lambda b: b.validation)
        arm, (size, value) = max(arm_values.items(), key=lambda item: item[1][1])
        floor = max(reference[size], best_trivial.validation)
        detail = (f"on validation, {arm} {value:.2f} against {random_init_name(size)} {reference[size]:.2f} and "
                  f"the best trivial baseline {best_trivial.model} {best_trivial.validation:.2f}")
        if value > floor + margin:
            out[task] = TaskEvidence(task, True, True, f"{detail}: {value - floor:+.2f} points, above the margin of "
                                     f"{margin:g}")
        else:
            out[task] = TaskEvidence(task, False, True, f"{detail}: the best arm is {value - floor:+.2f} points from "
                                     f"the better of the two, not above the margin of {margin:g}")
    return out


def rule_text(plan: Plan) -> str:
    return informative_text(plan.study.evaluation.informative_margin)


def informative_tasks(plan: Plan, results: list[dict], baselines: list[BaselineRow]) -> set[str]:
    """The tasks some arm beats the random-init model and the best trivial baseline on by the margin."""
    return {task for task, e in task_evidence(plan, results, baselines).items() if e.informative}


def claim_evidence(plan: Plan, results: list[dict], baselines: list[BaselineRow]) -> Evidence:
    """What the claims take from the informative rule: the tasks not shown informative, left out of every claim
    test, each with its reason."""
    evidence = task_evidence(plan, results, baselines)
    return Evidence(excluded={task: e.reason for task, e in evidence.items() if not e.informative},
                    informative_margin=plan.study.evaluation.informative_margin)
