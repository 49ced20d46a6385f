"""The ObjectiveSchedule: which objective (attention mode + targets + loss) each step trains.

Steps are numbered 1..train_iters. A two-phase schedule runs its first objective on steps 1..switch_step
and its second on switch_step+1..train_iters; the switch step is resolved once, by ``megamlm.config.switch_step``.
"""

from __future__ import annotations

import numpy as np

from megamlm.config import OBJECTIVE_PHASES, Objective
from megamlm.errors import ResumeError
from megamlm.objectives.batch import Batch, make_batch
from megamlm.objectives.masking import MaskingSpec

PHASES: dict[Objective, tuple[str, ...]] = OBJECTIVE_PHASES
"""Each objective's phases in order (declared in ``megamlm.config``; this name stays for existing callers)."""


def objective_at_step(objective: Objective, switch_step: int | None, step: int) -> str:
    """The objective a schedule (``--objective``, its switch step) trains at 1-based ``step``."""
    phases = PHASES[objective]
    if len(phases) == 1 or switch_step is None or step <= switch_step:
        return phases[0]
    return phases[1]


def schedule_state(objective: Objective, train_iters: int, switch_step: int | None) -> dict:
    """An ObjectiveSchedule's state_dict, from its settings."""
    return {"objective": objective, "train_iters": train_iters,
            "switch_step": switch_step if len(PHASES[objective]) == 2 else None}


class ObjectiveSchedule:
    def __init__(self, objective: Objective, switch_step: int | None, train_iters: int, masking: MaskingSpec,
                 seed: int):
        self.objective = objective
        self.train_iters = train_iters
        self.masking = masking
        self.seed = seed
        self.phases = PHASES[objective]
        self.switch_step = switch_step if len(self.phases) == 2 else None

    def objective_at(self, step: int) -> str:
        """The objective trained at 1-based ``step``."""
        return objective_at_step(self.objective, self.switch_step, step)

    def is_switch_step(self, step: int) -> bool:
        """True for the last step of the first phase (a checkpoint is written after it)."""
        return self.switch_step is not None and step == self.switch_step

    def describe(self) -> str:
        if self.switch_step is None:
            return f"objective {self.objective} for all {self.train_iters} steps"
        first, second = self.phases
        return (f"objective {self.objective}: {first} for steps 1-{self.switch_step}, {second} for steps "
                f"{self.switch_step + 1}-{self.train_iters} (switch step {self.switch_step})")

    def make_batch(self, step: int, tokens: np.ndarray, sample_ids: list[int],
                   document_ids: np.ndarray | None = None) -> Batch:
        """tokens (micro_batch, seq) of the given global sample ids -> the Batch for this step's objective."""
        return make_batch(self.objective_at(step), tokens, sample_ids, self.seed, self.masking, document_ids)

    def state_dict(self) -> dict:
        """The settings that decide each step's objective (it has no other state)."""
        return schedule_state(self.objective, self.train_iters, self.switch_step)

    def load_state_dict(self, state: dict) -> None:
        """Resume checks compare schedules before any work (training/resume.py); this only guards against a
        checkpoint that slipped past them."""
        if state != self.state_dict():
            raise ResumeError(f"the checkpoint's objective schedule {state} differs from this run's "
                              f"{self.state_dict()}; pass --override-schedule to continue with this run's")
