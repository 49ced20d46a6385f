"""A study's downstream scores per arm: per task family, fine-tuning learning-rate sensitivity and stability, and
continued-pretraining gains.

Quantities, each from the fine-tuning results (one file per model, task, LR and seed):

- a model's score on a task family: the mean over the family's tasks of its test mean over fine-tuning seeds at
  the task's best LR (best mean validation score; LRs tied at the best are resolved by the study's tie rule,
  ``eval.aggregate.TIE_RULES``: the smaller LR, the larger, or the mean over the tied LRs' test means, as the
  report's tables read them, ``eval.aggregate.summarize``);
- its score at one LR: the same mean at that LR for every task (the LR-sensitivity figure);
- its *stability loss* on a task: the test score at the best LR (by validation) minus the mean test score at the
  grid's other LRs, in absolute score points (0 = as good everywhere; large = only one LR works), averaged over
  the family's tasks; a model evaluated at one LR has none. This is the quantity behind the paper's "CLM
  fine-tunes more stably" and the stability claim's measure (averaged as the paper averages over the informative
  tasks), on a grid of at least 3 LRs whose best is inside it (``claims.py``). It does not depend on the gain over
  a random-init model: a measure divided by that gain ranks a model that learns less as less stable, which
  restates the score comparison instead of measuring stability. (No scalar definition of the paper's own
  stability measure was found in the text searched, its abstract and summaries; this is ours, stated in the
  report);
- a continuation's *gain*: its score minus its parent's final score, seed by seed (a continuation of seed s
  continues the parent of seed s).

An arm's values are one per pretraining seed (its models at the step asked for); the report's tables compare
them descriptively (``statistics.py``) and its claims by one pre-registered test each (``decision.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass

from megamlm.eval.aggregate import TIE_RULES, choose_lrs, per_lr, tied_at_best
from megamlm.study.evidence.rules import STABILITY_MIN_LRS
from megamlm.study.planning.arms import Arm, arm_of_run, arms
from megamlm.study.planning.plan import Plan
from megamlm.study.running.commands import evaluated_models


@dataclass
class Scores:
    """The fine-tuning results of a study, read once: per model, task and LR the validation and test means over
    fine-tuning seeds, the test score of every fine-tuning seed, and each task's family."""
    by_lr: dict[str, dict[str, dict[float, tuple[float, float]]]]
    seeds: dict[tuple[str, str, float], dict[int, float]]
    family_of: dict[str, str]
    tie_rule: str = "smaller"
    """How LRs tied at the best validation mean are resolved (``eval.aggregate.TIE_RULES``)."""

    @classmethod
    def of(cls, results: list[dict], tie_rule: str = "smaller") -> "Scores":
        by_lr: dict = defaultdict(lambda: defaultdict(dict))
        for row in per_lr(list(results)):
            by_lr[row.model][row.task][row.lr] = (row.validation_mean, row.test_mean)
        seeds: dict = defaultdict(dict)
        for r in results:
            seeds[(r["model"], r["task"], r["lr"])][r["seed"]] = r["test"]["score"]
        if tie_rule not in TIE_RULES:
            raise ValueError(f"tie rule {tie_rule!r}: use one of {', '.join(TIE_RULES)}")
        return cls(by_lr, seeds, {r["task"]: r["family"] for r in results}, tie_rule)

    @property
    def families(self) -> list[str]:
        return sorted(set(self.family_of.values()))

    def tasks(self, family: str) -> list[str]:
        return sorted(t for t, f in self.family_of.items() if f == family)

    @property
    def lrs(self) -> list[float]:
        return sorted({lr for tasks in self.by_lr.values() for lrs in tasks.values() for lr in lrs})

    def tied_lrs(self, model: str, task: str) -> list[float]:
        """The LRs whose validation mean is the best (within ``aggregate.TIE_TOLERANCE``), smallest first."""
        return tied_at_best(self._validation(model, task))

    def chosen_lrs(self, model: str, task: str) -> list[float]:
        """The LRs the model's task score is read at under the tie rule: one, or (``mean``) every tied one."""
        return choose_lrs(self._validation(model, task), self.tie_rule)

    def _validation(self, model: str, task: str) -> dict[float, float]:
        return {lr: v[0] for lr, v in self.by_lr.get(model, {}).get(task, {}).items()}

    def best_lr(self, model: str, task: str) -> float | None:
        """The best LR under the tie rule (``mean``: the smallest tied one, for display)."""
        chosen = self.chosen_lrs(model, task)
        return chosen[0] if chosen else None

    def _test_at_best(self, model: str, task: str) -> float | None:
        chosen = self.chosen_lrs(model, task)
        return sum(self.by_lr[model][task][lr][1] for lr in chosen) / len(chosen) if chosen else None

    def _family_mean(self, model: str, family: str, value) -> float | None:
        values = [value(model, task) for task in self.tasks(family)]
        return None if any(v is None for v in values) or not values else sum(values) / len(values)

    def score(self, model: str, family: str) -> float | None:
        """The model's family score: test means at each task's best LR, averaged over the family's tasks."""
        return self._family_mean(model, family, self._test_at_best)

    def score_at(self, model: str, family: str, lr: float) -> float | None:
        def at(m, task):
            value = self.by_lr.get(m, {}).get(task, {}).get(lr)
            return None if value is None else value[1]
        return self._family_mean(model, family, at)

    def task_stability_loss(self, model: str, task: str) -> float | None:
        """Test score at the best LR minus the mean test score at the grid's other LRs (None with one LR)."""
        lrs = self.by_lr.get(model, {}).get(task, {})
        if len(lrs) < 2:
            return None
        chosen = self.chosen_lrs(model, task)
        others = [lrs[lr][1] for lr in lrs if lr not in chosen]
        return self._test_at_best(model, task) - sum(others) / len(others) if others else None

    def stability_loss(self, model: str, family: str) -> float | None:
        """Test score at the best LR minus the mean at the grid's other LRs, averaged over the family's tasks."""
        return self._family_mean(model, family, self.task_stability_loss)

    def arm_validation_curve(self, models: Collection[str], task: str) -> dict[float, float]:
        """LR -> the mean over ``models`` of their validation means at that LR (the LRs every one of them has)."""
        curves = [self.by_lr.get(m, {}).get(task, {}) for m in models]
        if not curves or not all(curves):
            return {}
        common = set.intersection(*(set(c) for c in curves))
        return {lr: sum(c[lr][0] for c in curves) / len(curves) for lr in sorted(common)}

    def task_score(self, model: str, task: str) -> float | None:
        """The model's test mean over fine-tuning seeds at the task's best LR (under the tie rule)."""
        return self._test_at_best(model, task)

    def averaged(self, tasks: Collection[str], value: Callable[[str], float | None]) -> float | None:
        """``value`` of each task averaged as the paper averages: over each family's tasks, then over the
        families; None where a task has no value or there is no task."""
        families: dict[str, list[float | None]] = defaultdict(list)
        for task in tasks:
            families[self.family_of.get(task, task)].append(value(task))
        if not families or any(v is None for f in families.values() for v in f):
            return None
        return sum(sum(f) / len(f) for f in families.values()) / len(families)

    def claim_score(self, model: str, tasks: Collection[str]) -> float | None:
        """The model's score over ``tasks`` (test means at each task's best LR) averaged as the paper averages."""
        return self.averaged(tasks, lambda task: self.task_score(model, task))

    def finetuning_seeds(self, model: str, family: str) -> list[float]:
        """Per fine-tuning seed, the family mean of that seed's test scores at each task's best LR (the seeds
        every task has)."""
        per_task = []
        for task in self.tasks(family):
            chosen = self.chosen_lrs(model, task)
            if not chosen:
                return []
            at = [self.seeds.get((model, task, lr), {}) for lr in chosen]
            both = set.intersection(*(set(s) for s in at))
            per_task.append({seed: sum(s[seed] for s in at) / len(at) for seed in both})
        common = sorted(set.intersection(*(set(s) for s in per_task))) if per_task else []
        return [sum(s[seed] for s in per_task) / len(per_task) for seed in common]


def models_at(plan: Plan, arm: Arm, step: int | None = None) -> list[tuple[int, str]]:
    """(pretraining seed, model name) of the arm's evaluated models at ``step`` (None: each run's last)."""
    out = []
    for run in arm.runs:
        for model in evaluated_models(plan, run):
            if model.step == (run.train_iters if step is None else step):
                out.append((run.seed, model.name))
    return out


def evaluated_steps_of(plan: Plan, arm: Arm) -> list[int]:
    return sorted({m.step for run in arm.runs for m in evaluated_models(plan, run)})




def lr_curves(plan: Plan, scores: Scores) -> dict[str, dict[str, dict[float, list[float]]]]:
    """arm -> family -> LR -> the final models' family scores at that LR (one per pretraining seed)."""
    curves: dict = defaultdict(lambda: defaultdict(dict))
    for arm in arms(plan):
        models = [m for _, m in models_at(plan, arm)]
        for family in scores.families:
            for lr in scores.lrs:
                values = [v for v in (scores.score_at(m, family, lr) for m in models) if v is not None]
                if values:
                    curves[arm.label][family][lr] = values
    return {arm: dict(f) for arm, f in curves.items()}


def stability(plan: Plan, scores: Scores) -> dict[str, dict[str, list[float]]]:
    """arm -> family -> the final models' stability losses (one per pretraining seed; none with a single LR)."""
    out: dict = defaultdict(dict)
    for arm in arms(plan):
        models = [m for _, m in models_at(plan, arm)]
        for family in scores.families:
            values = [v for v in (scores.stability_loss(m, family) for m in models) if v is not None]
            if values:
                out[arm.label][family] = values
    return dict(out)


def stability_grid(plan: Plan, scores: Scores, compared: Collection[Arm],
                   tasks: list[str]) -> tuple[list[str], list[str]]:
    """(where each compared arm's best LR sits in the grid per task, the (arm, task) whose best is at an edge):
    an arm's best LR is the one with its final models' highest mean validation score (ties: the scores' tie rule;
    under ``mean`` every tied LR counts, and an edge among them is an edge)."""
    where, edges = [], []
    for arm in sorted(compared, key=lambda x: x.label):
        names = [m for _, m in models_at(plan, arm)]
        for task in tasks:
            curve = scores.arm_validation_curve(names, task)
            if len(curve) < STABILITY_MIN_LRS:
                continue
            grid = sorted(curve)
            chosen = choose_lrs(curve, scores.tie_rule)
            best, place = chosen[0], grid.index(chosen[0])
            edge = any(grid.index(lr) in (0, len(grid) - 1) for lr in chosen)
            where.append(f"{arm.label} on {task}: {best:g} ({place + 1} of {len(grid)}"
                         f"{', at the edge' if edge else ''})")
            if edge:
                edges.append(f"{arm.label} on {task}")
    return where, edges


@dataclass
class Continued:
    """A continued-pretraining arm and its gains over its parent: family -> [(continuation step, gains)]."""
    arm: Arm
    parent: Arm
    gains: dict[str, list[tuple[int, list[float]]]]


def continuation_gains(plan: Plan, scores: Scores) -> list[Continued]:
    """Every continuation arm with scores, and its gain over its parent's final model, seed by seed, at each of
    its evaluated steps (step 0 is its parent's last checkpoint, gain 0)."""
    by_run = arm_of_run(plan)
    out = []
    for arm in arms(plan):
        if arm.kind != "continuation":
            continue
        parent = by_run[arm.runs[0].continues]
        parent_final = {seed: name for seed, name in models_at(plan, parent)}
        gains: dict[str, list] = {}
        for family in scores.families:
            points = []
            for step in evaluated_steps_of(plan, arm):
                values = []
                for seed, name in models_at(plan, arm, step):
                    own, base = scores.score(name, family), scores.score(parent_final.get(seed, ""), family)
                    if own is not None and base is not None:
                        values.append(own - base)
                if values:
                    points.append((step, values))
            if points:
                gains[family] = points
        if gains:
            out.append(Continued(arm, parent, gains))
    return out
