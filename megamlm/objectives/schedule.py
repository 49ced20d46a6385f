"""The ObjectiveSchedule: which objective (attention mode + targets + loss) and which masking each step trains.

Steps are numbered 1..train_iters. A schedule is a sequence of *stages*, each one objective, and a switch step
between each two: stage k runs steps switch[k-1]+1..switch[k] (a two-stage schedule its first objective on steps
1..switch_step, its second on the rest). The switch steps are resolved once, by ``megamlm.config.switch_steps`` (a
recipe's phases of one objective are one stage, config/recipe_settings.py). "Phase" is a recipe's phase
(config/phases.py): the schedule is built from the resolved recipe (training/resolved_run.py), each phase's masking
from its first step on, and is not changed after. Its ``state_dict`` keeps the keys checkpoints have always had.
"""

from __future__ import annotations

import numpy as np

from megamlm.config import as_tuple, objective_name, objective_stages
from megamlm.errors import ResumeError
from megamlm.objectives.batch import Batch, make_batch
from megamlm.objectives.masking import MaskingSpec


def stage_switches(stages: tuple[str, ...], switch_step) -> tuple[int, ...]:
    """The switch steps of a schedule of ``stages``: ``switch_step`` (a step, a list or None), one per boundary."""
    return as_tuple(switch_step)[:len(stages) - 1]


def objectives_at_steps(objective: str, switch_step, steps) -> np.ndarray:
    """The objective a schedule (``--objective``, its switch step or steps) trains at each 1-based step of
    ``steps``: stage k up to and including its switch step (the planners read whole runs at once)."""
    stages = objective_stages(objective)
    return np.asarray(stages)[np.searchsorted(stage_switches(stages, switch_step), steps, side="left")]


def objective_at_step(objective: str, switch_step, step: int) -> str:
    """``objectives_at_steps`` of one step."""
    return str(objectives_at_steps(objective, switch_step, step))


def schedule_state(objective: str, train_iters: int, switch_step) -> dict:
    """An ObjectiveSchedule's state_dict, from its settings: the objective under its one name (``clm,mlm`` is
    ``clm_then_mlm``), and its switch as before (None for one stage, the step for two) or, for more stages, the
    list of steps."""
    stages = objective_stages(objective)
    switches = stage_switches(stages, switch_step)
    stored = None if not switches else switches[0] if len(stages) == 2 else list(switches)
    return {"objective": objective_name(stages), "train_iters": train_iters, "switch_step": stored}


class ObjectiveSchedule:
    def __init__(self, objective: str, switch_step, train_iters: int, masking: MaskingSpec, seed: int,
                 maskings: tuple = ()):
        """``switch_step``: the switch step of a two-stage schedule, or the list of them (``switch_steps``);
        ``maskings``: (first step, masking) of each phase of a recipe, in order (none: ``masking`` throughout)."""
        self.stages = objective_stages(objective)
        self.objective = objective_name(self.stages)
        self.train_iters = train_iters
        self.masking = masking
        self.seed = seed
        self.switch_steps: tuple[int, ...] = stage_switches(self.stages, switch_step)
        self.maskings: tuple[tuple[int, MaskingSpec], ...] = tuple((int(first), spec) for first, spec in maskings)
        """(first step, masking) of each phase of a recipe: the mask of a sample is a pure function of (seed, sample
        index, the step's phase's masking)."""

    def masking_at(self, step: int) -> MaskingSpec:
        """The masking of 1-based ``step``: its phase's, else the run's."""
        masking = self.masking
        for first, spec in self.maskings:
            if step >= first:
                masking = spec
        return masking

    @property
    def switch_step(self) -> int | None:
        """The first switch (the only one of a two-stage schedule); None for one objective."""
        return self.switch_steps[0] if self.switch_steps else None

    def objective_at(self, step: int) -> str:
        """The objective trained at 1-based ``step``."""
        return objective_at_step(self.objective, self.switch_steps, step)

    def is_switch_step(self, step: int) -> bool:
        """True for the last step of every stage but the last (a checkpoint is written after it)."""
        return step in self.switch_steps

    def describe(self) -> str:
        if not self.switch_steps:
            return f"objective {self.objective} for all {self.train_iters} steps"
        if len(self.stages) == 2:
            first, second = self.stages
            return (f"objective {self.objective}: {first} for steps 1-{self.switch_step}, {second} for steps "
                    f"{self.switch_step + 1}-{self.train_iters} (switch step {self.switch_step})")
        ends = (*self.switch_steps, self.train_iters)
        spans = ", ".join(f"{stage} for steps {start + 1}-{end}"
                          for stage, start, end in zip(self.stages, (0, *self.switch_steps), ends))
        return f"objective {self.objective}: {spans} (switch steps {', '.join(map(str, self.switch_steps))})"

    def make_batch(self, step: int, tokens: np.ndarray, sample_ids: list[int],
                   document_ids: np.ndarray | None = None, whole_documents: bool = False) -> Batch:
        """tokens (micro_batch, seq) of the given global sample ids -> the Batch for this step's objective
        (``whole_documents``: ``objectives.batch.make_batch``'s)."""
        return make_batch(self.objective_at(step), tokens, sample_ids, self.seed, self.masking_at(step), document_ids,
                          whole_documents)

    def state_dict(self) -> dict:
        """The settings that decide each step's objective (it has no other state)."""
        return schedule_state(self.objective, self.train_iters, self.switch_steps)

    def load_state_dict(self, state: dict) -> None:
        """Resume checks compare schedules before any work (training/resume.py); this only guards against a
        checkpoint that slipped past them."""
        if state != self.state_dict():
            raise ResumeError(f"the checkpoint's objective schedule {state} differs from this run's "
                              f"{self.state_dict()}; pass --override-schedule to continue with this run's")
