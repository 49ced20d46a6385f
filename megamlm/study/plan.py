"""From a study to a plan: every model of the grid as a run, each run starting from the run it shares the
longest prefix with.

Two runs share their first k steps when they train the same sample stream (size, seed, data, split, sequence
length, masking, optimizer, batch) and give every step 1..k the same objective and the exact same learning rate:
then the checkpoint of one at step k *is* the other's at step k, and ``pretrain.py --load RUN/iter_k`` continues
it as the other's straight run (the trainer checks exactly this: ``training/lineage.py``). The planner places the
arms one by one, longest first, each branching from the placed run it shares the most steps with (the earliest
such run, so the branch point is always a step its parent trains itself); each distinct prefix is then trained
exactly once, whatever the order. A CLM-then-MLM arm thus branches from the CLM run at its switch step, and a
shorter budget from a longer run at the end of their common stable phase (with a 2,000-step WSD decay, a
12k-step budget branches from a 42k-step run at step 10,000). Continued-pretraining arms start from their
parent's last checkpoint with ``--continue-from`` (or branch from a sibling continuation they share a prefix with).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from megamlm.config import OBJECTIVE_PHASES, Config, ConfigError, batch_start, given_config, validate
from megamlm.model.config import PRESETS
from megamlm.study.naming import arm_label, continuation_label, run_name
from megamlm.study.schema import Study, StudyError, grid_arms
from megamlm.study.settings import merge_settings, pretrain_settings
from megamlm.training.lineage import History, Segment

# Config fields that do not decide whether two runs' steps can be the same steps: the schedules (compared step by
# step), where checkpoints go, validation, logging and the parallel layout.
_SCHEDULE_FIELDS = {"objective": {"objective", "switch", "switch_step"},
                    "training": {"train_iters", "lr", "min_lr", "lr_decay_style", "lr_warmup_iters",
                                 "lr_warmup_fraction", "lr_wsd_decay_iters", "lr_wsd_decay_fraction", "exit_interval",
                                 "exit_duration_in_mins", "micro_batch_size", "device", "max_skipped_steps"}}
_LAYOUT_SECTIONS = ("checkpoint", "validation", "logging", "parallel", "performance")


@dataclass
class Run:
    """One pretraining run of the plan."""

    name: str
    label: str
    """The name without size and seed (how study files refer to an arm)."""
    size: str
    seed: int
    objective: str
    train_iters: int
    switch_step: int | None
    mask_ratio: float
    settings: dict
    """pretrain.py settings as config sections, without the planner's checkpoint flags."""
    config: Config
    continues: str | None = None
    """The run this one continues (continued pretraining), else None."""
    parent: str | None = None
    """The run whose checkpoint this one starts from: a branch (--load PARENT/iter_k) or a continuation."""
    branch_step: int = 0
    """Step of the parent's checkpoint a branch starts from; 0 for a run that starts at step 0."""
    save_at: list[int] = field(default_factory=list)
    """Steps whose checkpoints survive --keep-last: its children's branch points and evaluated checkpoints."""
    children: list[str] = field(default_factory=list)
    reproduces_paper: bool = False
    """A model the paper trained (its grid or continuation is marked ``reproduces_paper``)."""

    @property
    def is_continuation(self) -> bool:
        return self.continues is not None

    @property
    def steps_trained(self) -> int:
        """Steps this run trains itself (the rest are its parent's)."""
        return self.train_iters - self.branch_step

    @property
    def tokens_per_step(self) -> int:
        seq_length = self.config.model.seq_length or PRESETS[self.size]["max_seq_length"]
        return self.global_batch_size * seq_length

    @property
    def global_batch_size(self) -> int:
        """The study's global batch, else the one a launch starts from: the preset's recipe (config/batches.py;
        a launch keeps it unless its data-parallel ranks need more)."""
        given = self.config.training.global_batch_size
        return given if given is not None else batch_start(self.size)[1]

    def objective_steps(self, independent: bool = False) -> dict[str, int]:
        """Steps this run trains itself per objective (``independent``: all its steps, as if nothing were shared)."""
        first, switch = (0 if independent else self.branch_step), self.switch_step
        if switch is None:
            return {self.objective: self.train_iters - first}
        before, after = OBJECTIVE_PHASES[self.objective]
        counts = {before: max(0, switch - first), after: self.train_iters - max(first, switch)}
        return {k: v for k, v in counts.items() if v}

    def schedule(self) -> str:
        """``clm 1-10,000 -> mlm 10,001-42,000``."""
        if self.switch_step is None:
            return f"{self.objective} 1-{self.train_iters:,}"
        before, after = OBJECTIVE_PHASES[self.objective]
        return f"{before} 1-{self.switch_step:,} -> {after} {self.switch_step + 1:,}-{self.train_iters:,}"


@dataclass
class Plan:
    study: Study
    root: str
    """Folder of the runs (as given: relative paths are relative to where runs are launched)."""
    runs: list[Run]

    @property
    def marks_paper_runs(self) -> bool:
        """Whether the study says which of its runs are the paper's models (some grid or continuation is marked)."""
        return any(g.reproduces_paper for g in self.study.grids) or any(
            c.reproduces_paper for c in self.study.continued_pretraining)

    def run(self, name: str) -> Run:
        for run in self.runs:
            if run.name == name:
                return run
        raise StudyError(f"no run {name!r} in the plan of {self.study.name}; its runs: "
                         f"{', '.join(r.name for r in self.runs)}")

    def save_dir(self, run: Run) -> str:
        return str(Path(self.root) / run.name)

    def flags(self, run: Run) -> list[str]:
        """The pretrain.py flags of a run, as launched from the planning folder."""
        flags = settings_flags(run.settings) + ["--save", self.save_dir(run)]
        if run.save_at:
            flags += ["--save-at", ",".join(map(str, run.save_at))]
        if run.parent is not None and run.branch_step:
            flags += ["--load", str(Path(self.save_dir(self.run(run.parent))) / f"iter_{run.branch_step:07d}")]
        elif run.continues is not None:
            flags += ["--continue-from", self.save_dir(self.run(run.continues))]
        return flags

    def descendants(self, name: str) -> list[str]:
        out, todo = [], list(self.run(name).children)
        while todo:
            child = todo.pop(0)
            out.append(child)
            todo += self.run(child).children
        return out

    def evaluated_steps(self, run: Run) -> list[int]:
        """Checkpoints of this run to evaluate: the evaluation's checkpoint steps it trains itself, and its last."""
        if self.study.evaluation is None:
            return []
        steps = [s for s in self.study.evaluation.checkpoint_steps if run.branch_step < s < run.train_iters]
        return sorted(steps) + [run.train_iters]


# ---- settings -> flags ---------------------------------------------------------------------------------------


def settings_flags(settings: dict[str, dict]) -> list[str]:
    """pretrain.py flags for config-section settings (every value that differs from pretrain.py's default)."""
    defaults = Config().to_dict()
    flags = []
    for section, values in settings.items():
        for key, value in values.items():
            if value == defaults[section][key]:
                continue
            flag = "--" + key.replace("_", "-")
            if value is None:
                raise StudyError(f"pretrain.{section}.{key}: null cannot be passed to pretrain.py; leave the key out "
                                 "to keep pretrain.py's default")
            if isinstance(value, bool):
                flags.append(flag if value else f"--no-{key.replace('_', '-')}")
            elif isinstance(value, list):
                flags += [flag, *map(str, value)]
            else:
                flags += [flag, str(value)]
    return flags


def _parse(flags: list[str], where: str) -> Config:
    """A run's flags as a validated Config, without a launch's fill-ins (the batch sizes fitted to a world size are
    the launch's: the plan does not know where each run will run)."""
    try:
        cfg, _ = given_config(flags)  # with the preset's recipe, as pretrain.py will run it
        validate(cfg)
        return cfg
    except ConfigError as err:
        raise StudyError(f"{where}: {err}") from None


# ---- arms -> runs --------------------------------------------------------------------------------------------


def _arm_run(study: Study, base: dict, size: str, seed: int, arm: tuple[str, int, int | None, float], label: str,
             continues: str | None = None) -> Run:
    """``arm``: (objective, train_iters, switch step or None, mask ratio), as ``grid_arms`` yields them."""
    objective, train_iters, switch, mask_ratio = arm
    base = {section: dict(values) for section, values in base.items()}
    if switch is None:  # a one-objective run has no switch (a base config's switch_step would only confuse)
        for key in ("switch", "switch_step"):
            base.get("objective", {}).pop(key, None)
    settings = merge_settings(base, {
        "model": {"model": size}, "training": {"train_iters": train_iters, "seed": seed},
        "objective": {"objective": objective, "mask_ratio": mask_ratio,
                      **({"switch_step": switch} if switch is not None else {})}})
    name = run_name(size, label, seed, len(study.seeds) > 1)
    config = _parse(settings_flags(settings) + ["--save", name], f"run {name}")
    return Run(name, label, size, seed, objective, train_iters, switch, mask_ratio, settings, config,
               continues=continues)


def _stream_key(run: Run) -> str:
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
    segment = Segment.of_config(config)
    lr, steps = segment.lr_schedule_object(), range(1, config.training.train_iters + 1)
    return np.array([(segment.objective_at(step), lr.lr_at(step)) for step in steps],
                    dtype=[("objective", "U3"), ("lr", "f8")])


def shared_steps(a: np.ndarray, b: np.ndarray) -> int:
    """How many first steps two runs of one stream train alike (``step_settings`` of each): the same objective and
    exactly the same learning rate at every step (``History.first_difference``, the trainer's check, agrees)."""
    n = min(len(a), len(b))
    differ = np.flatnonzero((a["objective"][:n] != b["objective"][:n]) | (a["lr"][:n] != b["lr"][:n]))
    return int(differ[0]) if len(differ) else n


def _placement_order(run: Run) -> tuple:
    """Longest runs first; at equal length one objective before two, CLM first, later switches first; the seeds of
    an arm side by side (runs of different seeds never branch from each other, and a study run in this order has
    every seed of its first arms early)."""
    return (run.size, run.mask_ratio, -run.train_iters, run.switch_step is not None, run.objective != "clm",
            -(run.switch_step or 0), run.seed)


def _place(runs: list[Run]) -> list[Run]:
    placed: list[Run] = []
    steps_of = {run.name: step_settings(run.config) for run in runs}
    for run in runs:
        key = _stream_key(run)
        best, best_steps = None, 0
        for other in placed:
            if _stream_key(other) == key:
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


def build_plan(study: Study, root: str | None = None) -> Plan:
    """The plan of runs of a checked study (``load.load_study``); raises StudyError for a run pretrain.py would
    refuse."""
    base = pretrain_settings(study)
    arms: dict[str, Run] = {}
    for size in study.sizes:
        for seed in study.seeds:
            for grid in study.grids:
                for objective, budget, switch, mask_ratio in grid_arms(grid):
                    label = arm_label(objective, budget, switch, mask_ratio)
                    run = _arm_run(study, base, size, seed, (objective, budget, switch, mask_ratio), label)
                    arms.setdefault(run.name, run).reproduces_paper |= grid.reproduces_paper
    pretraining = _place(sorted(arms.values(), key=_placement_order))
    by_label = {(r.size, r.seed, r.label): r for r in pretraining}
    continuations = []
    for continuation in study.continued_pretraining:
        for size in study.sizes:
            for seed in study.seeds:
                for parent_label in continuation.parents:
                    parent = by_label[(size, seed, parent_label)]
                    cpt_base = merge_settings(base, continuation.pretrain)
                    for steps in continuation.steps:
                        label = continuation_label(parent_label, continuation.objective, steps)
                        run = _arm_run(study, cpt_base, size, seed, (continuation.objective, steps, None,
                                                                     parent.mask_ratio), label, continues=parent.name)
                        run.reproduces_paper = continuation.reproduces_paper
                        continuations.append(run)
    continuations = _place(sorted(continuations, key=lambda r: (r.continues, -r.train_iters)))
    by_name = {r.name: r for r in pretraining}
    for run in continuations:
        if not run.branch_step:
            by_name[run.continues].children.append(run.name)
    runs = pretraining + continuations
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise StudyError(f"two arms get the same run name {twice}; give distinct mask ratios or steps")
    plan = Plan(study, root or study.default_root, runs)
    _check_checkpoint_steps(plan)
    _pin_checkpoints(plan)
    _check_branches(plan)
    return plan


def _check_checkpoint_steps(plan: Plan) -> None:
    """Every evaluation.checkpoint_steps step is a step some run trains itself: one beyond every run's budget
    would be evaluated nowhere, without a word."""
    if plan.study.evaluation is None:
        return
    unused = [s for s in plan.study.evaluation.checkpoint_steps
              if not any(run.branch_step < s <= run.train_iters for run in plan.runs)]
    if unused:
        longest = max(run.train_iters for run in plan.runs)
        scaled = f" (after --scale {plan.study.scale:g})" if plan.study.scale != 1 else ""
        raise StudyError(f"evaluation.checkpoint_steps {unused}{scaled} lie outside every run (the longest trains "
                         f"steps 1-{longest}); no checkpoint would be evaluated there: drop them or lower them")


def _pin_checkpoints(plan: Plan) -> None:
    for run in plan.runs:
        steps = {plan.run(child).branch_step for child in run.children if plan.run(child).branch_step}
        steps |= set(plan.evaluated_steps(run))
        run.save_at = sorted(s for s in steps if run.branch_step < s < run.train_iters)
        _parse(plan.flags(run), f"run {run.name}")


def _check_branches(plan: Plan) -> None:
    """Every branch is one the trainer accepts: the parent's history up to the branch step is the child's."""
    for run in plan.runs:
        if not run.branch_step:
            continue
        parent = plan.run(run.parent)
        difference = History([Segment.of_config(parent.config)]).first_difference(Segment.of_config(run.config),
                                                                                  run.branch_step)
        if difference is not None or _stream_key(parent) != _stream_key(run):
            raise AssertionError(f"planned branch {parent.name} -> {run.name} at {run.branch_step}: {difference}")


def independent_steps(run: Run) -> int:
    """Steps the run would train without branching: all of them (a continuation starts from its parent anyway)."""
    return run.train_iters

