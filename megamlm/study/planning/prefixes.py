"""Which runs share a prefix, and the tree of branches that trains every shared prefix once.

Two runs share their first k steps when every setting a resume does not ignore agrees (by its role,
``config/roles.py``: the model's shape, the sample stream, the masking, the optimizer, the batch and the numerics, as
values: ``stream_key``) and every step 1..k has the same objective, the exact same learning rate and the same
recipe phase settings: data, sequence length, RoPE base, masking and batch (the roles compared step by step:
``step_settings``; the phase settings are ``training/recipe_run.py``'s ``PHASE_SETTINGS``): then the checkpoint of
one at step k *is* the other's at step k (the trainer checks exactly this: ``training/resume.py``,
``training/lineage.py``). Where the phases differ after k, a resume accepts the branch at a phase boundary (or
inside a phase whose later phases agree); ``shared_steps`` asks the resume's own check (``recipe_start``) and
otherwise branches at the last phase boundary before k, so that every planned branch is one the trainer takes.
A WSD ablation whose arms share a stable phase and differ in their decay phase's mask rate, data or objective thus
trains the stable phase once, its decays branching at the decay's first step. ``place`` attaches each run, in the
order given, to the placed run it shares the most steps with, whatever the phases: a CLM-then-MLM arm branches from
the CLM run at its switch step, a CLM detour (mlm, clm, mlm) from the MLM run at its first switch, an MNTP-then-MLM
arm from the MNTP run at its switch, and a shorter budget from a longer run at the end of their common stable phase.
Each distinct prefix is then trained exactly once whatever the order (the steps trained are those of the trie of all
runs' step sequences).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megamlm.config import PHASE_OBJECTIVES, SECTION_CLASSES, Config, batch_start
from megamlm.config.phases import Recipe, recipe_of
from megamlm.config.recipe_settings import apply_recipe
from megamlm.config.roles import compared_as_values
from megamlm.errors import ResumeError
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import StudyError
from megamlm.training.lineage import Segment
from megamlm.training.recipe_run import phase_settings_by_step
from megamlm.training.resume import recipe_start

_VALUES = compared_as_values(SECTION_CLASSES)
"""(section, field) of the settings two runs must share as values (the others are ignored, or compared per step)."""
_OBJECTIVE_DTYPE = f"U{max(map(len, PHASE_OBJECTIVES))}"


def stream_key(run: Run) -> str:
    """Everything that must be equal for two runs' steps to be the same steps, except what is compared per step."""
    return settings_key(run.config) + repr(run.continues)


def settings_key(config: Config) -> str:
    """The values of the settings two runs must share for their steps to be the same steps (``_VALUES``)."""
    return repr([(section, name, getattr(getattr(config, section), name)) for section, name in _VALUES])


@dataclass(frozen=True)
class StepSettings:
    """What a run trains every step 1..train_iters with, as the trainer computes it: the objective, learning rate
    and phase settings of each step (``table``), and its recipe (what a resume compares besides)."""

    table: np.ndarray
    recipe: Recipe
    listed: bool
    """The run gives a ``phases:`` list (else its phases are the objective-only form's)."""

    def __len__(self) -> int:
        return len(self.table)


def planned_config(config: Config) -> Config:
    """``config`` with its recipe's phases applied as a launch applies them (its objectives, switch steps, decay
    and length), the global batch the launch starts from filled in where the plan leaves it to the launch (a plan's
    configs are not fitted to a world size: ``plan._parse``); a resolved config is returned as it is."""
    if config.training.global_batch_size is None:
        training = dataclasses.replace(config.training, global_batch_size=batch_start(config.model.model)[1])
        config = dataclasses.replace(config, training=training)
    return apply_recipe(config)[0] if config.recipe.phases else config


def run_schedule(run: Run) -> str:
    """The plan's schedule of ``run``, each phase with its steps: ``clm 1-10,000 -> mlm 10,001-42,000``; for a
    recipe in phases (``phases:``), what each phase sets that the one before did not, as the trainer resolves it:
    ``mlm 1-160 -> mlm 161-200 (mask 0.15, decay minus_sqrt)``."""
    config = run.config
    if not config.recipe.phases:
        return " -> ".join(f"{phase} {start:,}-{end:,}" for phase, start, end in run.phase_spans())
    texts, before = [], None
    for phase in recipe_of(planned_config(config)).phases:
        changes = [] if before is None else [f"{label} {show(phase)}" for key, label, show in _SCHEDULE_SETTINGS
                                             if getattr(phase, key) != getattr(before, key)]
        if phase.lr_warmup_iters and before is not None:
            changes.append(f"re-warmup {phase.lr_warmup_iters:,}")
        if phase.lr_decay:
            changes.append(f"decay {phase.lr_wsd_decay_style or config.training.lr_wsd_decay_style}")
        detail = f" ({', '.join(changes)})" if changes else ""
        texts.append(f"{phase.objective} {phase.first_step:,}-{phase.last_step:,}{detail}")
        before = phase
    return " -> ".join(texts)


_SCHEDULE_SETTINGS = (  # (Phase field, label, its text) of what run_schedule names when a phase changes it
    ("seq_length", "seq", lambda p: f"{p.seq_length:,}"),
    ("mask_ratio", "mask", lambda p: f"{p.mask_ratio:g}"),
    ("data_path", "data", lambda p: "+".join(Path(x).name for x in p.data_path) or "the bundled corpus"),
    ("rope_bases", "RoPE", lambda p: ", ".join(f"{b:,g}" for b in p.rope_bases if b is not None)),
    ("global_batch_size", "batch", lambda p: f"{p.global_batch_size:,}" if p.global_batch_size else "the run's"),
    ("lr", "lr", lambda p: f"{p.lr:g}" if p.lr is not None else "the run's"),
)


def step_settings(config: Config) -> StepSettings:
    """The (objective, learning rate, phase settings) of every step 1..train_iters, as the trainer computes them."""
    config = planned_config(config)
    recipe, last = recipe_of(config), config.training.train_iters
    segment = Segment.of_config(config, recipe)
    phases = phase_settings_by_step(recipe)[:last]
    table = np.empty(last, dtype=[("objective", _OBJECTIVE_DTYPE), ("lr", "f8"),
                                  ("phase", f"U{max(map(len, phases))}")])
    table["objective"], table["lr"] = segment.objectives(1, last), segment.learning_rates(1, last)
    table["phase"] = phases
    return StepSettings(table, recipe, bool(config.recipe.phases))


def shared_steps(parent: StepSettings, child: StepSettings) -> int:
    """How many first steps of ``parent`` the ``child`` (a run of the same stream) can branch from: the steps both
    train alike (the same objective, exactly the same learning rate and the same phase settings at every step;
    ``History.first_difference`` and ``recipe_start`` agree), where a resume of the child from the parent's
    checkpoint there is accepted; else at the last phase boundary before (the steps up to it agree)."""
    a, b = parent.table, child.table
    n = min(len(a), len(b))
    differ = np.flatnonzero((a["objective"][:n] != b["objective"][:n]) | (a["lr"][:n] != b["lr"][:n])
                            | (a["phase"][:n] != b["phase"][:n]))
    shared = int(differ[0]) if len(differ) else n
    boundaries = {*parent.recipe.boundaries, *child.recipe.boundaries}
    for step in [shared] + sorted((s for s in boundaries if s < shared), reverse=True):
        if _resume_accepts(parent, child, step):
            return step
    return 0


def _resume_accepts(parent: StepSettings, child: StepSettings, step: int) -> bool:
    """Whether the trainer accepts the child's launch from the parent's checkpoint at ``step`` as far as the phases
    go (the history up to ``step`` agrees: ``shared_steps`` asks only there)."""
    if step == 0 or step >= len(child):
        return True  # a start from scratch; the same steps throughout (``place`` refuses the duplicate)
    try:
        recipe_start(parent.recipe.to_list(), child.recipe.to_list(), step, child.listed)
    except ResumeError:
        return False
    return True


def placement_order(run: Run) -> tuple:
    """Longest runs first; at equal length one phase before several, CLM first, later switches first; the seeds of
    an arm side by side (runs of different seeds never branch from each other, and a study run in this order has
    every seed of its first arms early); then the objective's name (MLM before MNTP, stage sequences in order)."""
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
