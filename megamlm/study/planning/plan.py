"""From a study to a plan: every model of the grids and schedules as a run, each run starting from the run it
shares the longest prefix with (``study.prefixes``).

Two runs share their first k steps when they train the same sample stream (size, seed, data, split, sequence
length, masking, optimizer, batch) and give every step 1..k the same objective and the exact same learning rate:
then the checkpoint of one at step k *is* the other's at step k, and ``pretrain.py --load RUN/iter_k`` continues
it as the other's straight run (the trainer checks exactly this: ``training/lineage.py``). The planner places the
arms one by one, longest first, each branching from the placed run it shares the most steps with (the earliest
such run, so the branch point is always a step its parent trains itself); each distinct prefix is then trained
exactly once, whatever the order. A CLM-then-MLM arm thus branches from the CLM run at its switch step, a CLM
detour (mlm, clm, mlm) from the MLM run at its first switch, an MNTP-then-MLM arm from the MNTP run, and a
shorter budget from a longer run at the end of their common stable phase (with a 2,000-step WSD decay, a
12k-step budget branches from a 42k-step run at step 10,000). Continued-pretraining arms start from their
parent's last checkpoint with ``--continue-from`` (or branch from a sibling continuation they share a prefix with).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from megamlm.config import Config, ConfigError, config_from_settings, given_config, switch_steps, validate
from megamlm.config.flags import given_settings
from megamlm.config.phases import recipe_of
from megamlm.config.recipe_settings import check_recipe_against_model
from megamlm.config.recipes import with_recipe
from megamlm.study.planning.naming import arm_label, continuation_label, run_name
from megamlm.study.planning.phase_arms import PhaseArmSpec, phase_arm_specs
from megamlm.study.planning.prefixes import place, placement_order, planned_config, stream_key
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import ArmSpec, Study, StudyError, all_seeds, study_arms
from megamlm.study.planning.settings import merge_settings, pretrain_settings
from megamlm.training.lineage import History, Segment


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

    def config_file(self, run: Run) -> Path | None:
        """The run's whole config as a pretrain.py --config file (``config_text``), for a run whose recipe has
        phases (a ``phases:`` list can only be given in a file); None for the others (their settings are flags)."""
        return Path(self.root) / "configs" / f"{run.name}.yaml" if run.config.recipe.phases else None

    def flags(self, run: Run) -> list[str]:
        """The pretrain.py flags of a run, as launched from the planning folder."""
        config_file = self.config_file(run)
        flags = ["--config", str(config_file)] if config_file else settings_flags(run.settings)
        flags += ["--save", self.save_dir(run), "--tracker-group", self.study.name]  # one group in the trackers
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


def _parse(flags: list[str], where: str, file_settings: dict | None = None) -> Config:
    """A run's flags as a validated Config, without a launch's fill-ins (the batch sizes fitted to a world size are
    the launch's: the plan does not know where each run will run). ``file_settings``: the run's --config file's
    settings (a run with phases), which the flags override as pretrain.py's do; its phases are then applied as a
    launch applies them (``prefixes.planned_config``) and checked against the model."""
    try:
        if file_settings is None:
            cfg, _ = given_config(flags)  # with the preset's recipe, as pretrain.py will run it
        else:
            settings = {section: dict(values) for section, values in file_settings.items()}
            for section, values in given_settings(flags).items():
                settings.setdefault(section, {}).update(values)
            cfg = config_from_settings(settings)
        validate(cfg)
        if cfg.recipe.phases:
            cfg = planned_config(cfg)
            check_recipe_against_model(cfg, recipe_of(cfg))
        return cfg
    except ConfigError as err:
        raise StudyError(f"{where}: {err}") from None


# ---- arms -> runs --------------------------------------------------------------------------------------------


def _arm_run(base: dict, size: str, seed: int, arm: ArmSpec, label: str, several_seeds: bool,
             continues: str | None = None) -> Run:
    """One run of an arm (``schema.grid_arms``, ``schema.schedule_arms``) at one size and seed; ``several_seeds``
    (the study trains more than one) puts the seed in the run's name."""
    base = {section: dict(values) for section, values in base.items()}
    base.pop("recipe", None)  # a continuation of a phase arm trains its one objective, not the parent's phases
    if not arm.switch_steps:  # a one-objective run has no switch (a base config's switch_step would only confuse)
        for key in ("switch", "switch_step"):
            base.get("objective", {}).pop(key, None)
    # One switch is given as a number (--switch-step 30, as before schedules of more phases), several as a list.
    switches = None if not arm.switch_steps else arm.switch_steps[0] if len(arm.switch_steps) == 1 \
        else list(arm.switch_steps)
    settings = merge_settings(base, {
        "model": {"model": size}, "training": {"train_iters": arm.train_iters, "seed": seed},
        "objective": {"objective": arm.objective, "mask_ratio": arm.mask_ratio,
                      **({"switch_step": switches} if switches is not None else {})}})
    name = run_name(size, label, seed, several_seeds)
    config = _parse(settings_flags(settings) + ["--save", name], f"run {name}")
    return Run(name, label, size, seed, arm.objective, arm.train_iters, tuple(arm.switch_steps), arm.mask_ratio,
               settings, config, continues=continues)


def _phase_arm_run(base: dict, size: str, seed: int, spec: PhaseArmSpec, several_seeds: bool) -> Run:
    """One run of a phase arm (``phase_arms.phase_arm_specs``) at one size and seed: the study's settings with the
    arm's phases, the preset's recipe filled in (``settings`` is then the run's whole --config file)."""
    settings = merge_settings(base, {"model": {"model": size}, "training": {"train_iters": spec.train_iters,
                                                                            "seed": seed}})
    settings["recipe"] = {"phases": spec.phases}
    try:
        settings, _ = with_recipe(settings)
    except ConfigError as err:
        raise StudyError(f"run {run_name(size, spec.label, seed, several_seeds)}: {err}") from None
    name = run_name(size, spec.label, seed, several_seeds)
    config = _parse(["--save", name], f"run {name}", settings)
    t = config.training
    return Run(name, spec.label, size, seed, config.objective.objective, t.train_iters,
               tuple(switch_steps(config.objective, t.train_iters)), recipe_of(config).phases[0].mask_ratio,
               settings, config)


def build_plan(study: Study, root: str | None = None) -> Plan:
    """The plan of runs of a checked study (``load.load_study``); raises StudyError for a run pretrain.py would
    refuse."""
    base = pretrain_settings(study)
    seeds, study_arm_list = all_seeds(study), study_arms(study)
    several_seeds = len(seeds) > 1
    arms: dict[str, Run] = {}
    for size in study.sizes:
        for seed in seeds:
            for arm in study_arm_list:
                if seed in arm.seeds:
                    run = _arm_run(base, size, seed, arm.spec, arm_label(*arm.spec), several_seeds)
                    arms.setdefault(run.name, run).reproduces_paper |= arm.reproduces_paper
            for spec in phase_arm_specs(study, base):
                if seed in spec.seeds:
                    run = _phase_arm_run(base, size, seed, spec, several_seeds)
                    arms.setdefault(run.name, run).reproduces_paper |= spec.reproduces_paper
    pretraining = place(sorted(arms.values(), key=placement_order))
    by_label = {(r.size, r.seed, r.label): r for r in pretraining}
    continuations = []
    for continuation in study.continued_pretraining:
        for size in study.sizes:
            for seed in seeds:
                for parent_label in continuation.parents:
                    parent = by_label.get((size, seed, parent_label))
                    if parent is None:  # the parent arm has no run of this seed: nor has its continuation
                        continue
                    cpt_base = merge_settings(base, continuation.pretrain)
                    for steps in continuation.steps:
                        label = continuation_label(parent_label, continuation.objective, steps)
                        arm = ArmSpec(continuation.objective, steps, (), parent.mask_ratio)
                        run = _arm_run(cpt_base, size, seed, arm, label, several_seeds, continues=parent.name)
                        run.reproduces_paper = continuation.reproduces_paper
                        continuations.append(run)
    continuations = place(sorted(continuations, key=lambda r: (r.continues, -r.train_iters)))
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
        flags = plan.flags(run)
        if plan.config_file(run) is None:
            _parse(flags, f"run {run.name}")
        else:  # the flags after --config FILE, over the file's settings
            _parse(flags[2:], f"run {run.name}", run.settings)


def _check_branches(plan: Plan) -> None:
    """Every branch is one the trainer accepts: the parent's history up to the branch step is the child's."""
    for run in plan.runs:
        if not run.branch_step:
            continue
        parent = plan.run(run.parent)
        difference = History([Segment.of_config(parent.config)]).first_difference(Segment.of_config(run.config),
                                                                                  run.branch_step)
        if difference is not None or stream_key(parent) != stream_key(run):
            raise AssertionError(f"planned branch {parent.name} -> {run.name} at {run.branch_step}: {difference}")

