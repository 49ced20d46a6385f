"""Which runs share a prefix, and the tree of branches that trains every shared prefix once.

Two runs share their first k steps when every setting a resume does not ignore agrees (by its role,
``config/roles.py``: the model's shape, the sample stream, the masking, the optimizer, the batch and the numerics, as
values: ``stream_key``) and every step 1..k has the same objective and the exact same learning rate (the roles
compared step by step: ``step_settings``): then the checkpoint of one at step k *is* the other's at step k (the
trainer checks exactly this: ``training/resume.py``, ``training/lineage.py``). ``place`` attaches each run, in the
order given, to the placed run it shares the most steps with, whatever the phases: a CLM-then-MLM arm branches from
the CLM run at its switch step, a CLM detour (mlm, clm, mlm) from the MLM run at its first switch, an MNTP-then-MLM
arm from the MNTP run at its switch, and a shorter budget from a longer run at the end of their common stable phase.
Each distinct prefix is then trained exactly once whatever the order (the steps trained are those of the trie of all
runs' step sequences).
"""

from __future__ import annotations

import numpy as np

from megamlm.config import PHASE_OBJECTIVES, SECTION_CLASSES, Config
from megamlm.config.roles import compared_as_values
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import StudyError
from megamlm.training.lineage import Segment

_VALUES = compared_as_values(SECTION_CLASSES)
"""(section, field) of the settings two runs must share as values (the others are ignored, or compared per step)."""
_OBJECTIVE_DTYPE = f"U{max(map(len, PHASE_OBJECTIVES))}"


def stream_key(run: Run) -> str:
    """Everything that must be equal for two runs' steps to be the same steps, except what is compared per step."""
    return settings_key(run.config) + repr(run.continues)


def settings_key(config: Config) -> str:
    """The values of the settings two runs must share for their steps to be the same steps (``_VALUES``)."""
    return repr([(section, name, getattr(getattr(config, section), name)) for section, name in _VALUES])


def step_settings(config: Config) -> np.ndarray:
    """The (objective, learning rate) of every step 1..train_iters, as the trainer computes them."""
    segment, last = Segment.of_config(config), config.training.train_iters
    settings = np.empty(last, dtype=[("objective", _OBJECTIVE_DTYPE), ("lr", "f8")])
    settings["objective"], settings["lr"] = segment.objectives(1, last), segment.learning_rates(1, last)
    return settings


def shared_steps(a: np.ndarray, b: np.ndarray) -> int:
    """How many first steps two runs of one stream train alike (``step_settings`` of each): the same objective and
    exactly the same learning rate at every step (``History.first_difference``, the trainer's check, agrees)."""
    n = min(len(a), len(b))
    differ = np.flatnonzero((a["objective"][:n] != b["objective"][:n]) | (a["lr"][:n] != b["lr"][:n]))
    return int(differ[0]) if len(differ) else n


def placement_order(run: Run) -> tuple:
    """Longest runs first; at equal length one phase before several, CLM first, later switches first; the seeds of
    an arm side by side (runs of different seeds never branch from each other, and a study run in this order has
    every seed of its first arms early); then the objective's name (MLM before MNTP, phase sequences in order)."""
    return (run.size, run.mask_ratio, -run.train_iters, bool(run.switch_steps), run.objective != "clm",
            tuple(-s for s in run.switch_steps), run.seed, run.objective)


def place(runs: list[Run]) -> list[Run]:
    """Set each run's parent and branch step: the earliest placed run it shares the most steps with (ties keep the
    earliest, so the branch step is always one its parent trains itself)."""
    placed: list[Run] = []
    steps_of = {run.name: step_settings(run.config) for run in runs}
    key_of = {run.name: stream_key(run) for run in runs}
    for run in runs:
        best, best_steps = None, 0
        for other in placed:
            if key_of[other.name] == key_of[run.name]:
                steps = shared_steps(steps_of[other.name], steps_of[run.name])
                if steps > best_steps:  # ties keep the earliest: it trains the branch step itself
                    best, best_steps = other, steps
        if best is not None and best_steps >= run.train_iters:
            raise StudyError(f"runs {best.name} and {run.name} train the same steps; list each arm once")
        if best is not None:
            run.parent, run.branch_step = best.name, best_steps
            best.children.append(run.name)
        elif run.continues is not None:
            run.parent = run.continues
        placed.append(run)
    return placed
