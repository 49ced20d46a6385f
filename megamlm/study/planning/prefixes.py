"""Which runs share a prefix, and the tree of branches that trains every shared prefix once.

Two runs share their first k steps when they train the same sample stream (size, seed, data, split, sequence
length, masking, optimizer, batch) and give every step 1..k the same objective and the exact same learning rate:
then the checkpoint of one at step k *is* the other's at step k (the trainer checks exactly this:
``training/lineage.py``). ``place`` attaches each run, in the order given, to the placed run it shares the most
steps with, whatever the phases: a CLM-then-MLM arm branches from the CLM run at its switch step, a CLM detour
(mlm, clm, mlm) from the MLM run at its first switch, an MNTP-then-MLM arm from the MNTP run at its switch, and a
shorter budget from a longer run at the end of their common stable phase. Each distinct prefix is then trained
exactly once whatever the order (the steps trained are those of the trie of all runs' step sequences).
"""

from __future__ import annotations

import numpy as np

from megamlm.config import PHASE_OBJECTIVES, Config
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import StudyError
from megamlm.training.lineage import Segment

# Config fields that do not decide whether two runs' steps can be the same steps: the schedules (compared step by
# step), where checkpoints go, validation, logging and the parallel layout.
_SCHEDULE_FIELDS = {"objective": {"objective", "switch", "switch_step"},
                    "training": {"train_iters", "lr", "min_lr", "lr_decay_style", "lr_warmup_iters",
                                 "lr_warmup_fraction", "lr_wsd_decay_iters", "lr_wsd_decay_fraction", "exit_interval",
                                 "exit_duration_in_mins", "micro_batch_size", "device", "max_skipped_steps"}}
_LAYOUT_SECTIONS = ("checkpoint", "validation", "logging", "parallel", "performance")
_OBJECTIVE_DTYPE = f"U{max(map(len, PHASE_OBJECTIVES))}"


def stream_key(run: Run) -> str:
    """Everything that must be equal for two runs' steps to be the same steps, except the schedules."""
    config = run.config.to_dict()
    for section in _LAYOUT_SECTIONS:
        config.pop(section)
    for section, names in _SCHEDULE_FIELDS.items():
        for name in names:
            config[section].pop(name)
    return repr((sorted((s, sorted(v.items())) for s, v in config.items()), run.continues))


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
