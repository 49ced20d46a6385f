"""Every check of a study file on its own, each a StudyError naming the key and the fix (each run's pretrain.py
settings are checked when planned), and the checks of the values written into SLURM job scripts."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import get_args

from megamlm import extras
from megamlm.config import SECTION_CLASSES, ConfigError, objective_stages
from megamlm.config.checks import check_stages, check_switches
from megamlm.config.derived import Switches
from megamlm.config.sections import ObjectiveConfig
from megamlm.eval.finetune import Hyperparameters
from megamlm.eval.local_data import DATA_DIR_ENV, TASK_FILES, default_data_dir
from megamlm.eval.paper_datasets import PAPER_DATASETS, RETRIEVAL_CORPORA
from megamlm.eval.tasks import TaskSettings
from megamlm.model.config import PRESETS
from megamlm.study.planning.claims_table import load_claims
from megamlm.study.planning.naming import arm_label
from megamlm.study.planning.phase_arms import check_phase_arms, phase_arm_specs
from megamlm.study.planning.schema import (
    EVALUATE_OWN_SETTINGS,
    ContinuationObjective,
    Evaluation,
    ExportArch,
    Schedule,
    Slurm,
    Study,
    StudyError,
    TieRule,
    study_arms,
)
from megamlm.study.planning.settings import PLANNER_SETTINGS, pretrain_settings


def check_evaluation_keys(data: dict) -> None:
    """The study file's evaluation settings before they are read: none that the grid sets per run (lr, seed)."""
    evaluation = data.get("evaluation")
    if not isinstance(evaluation, dict):
        return
    for key, cls in (("hyperparameters", Hyperparameters), ("task_settings", TaskSettings)):
        values = evaluation.get(key)
        known = {f.name for f in dataclasses.fields(cls)} - set(EVALUATE_OWN_SETTINGS)
        for name in values if isinstance(values, dict) else ():
            if name not in known:
                raise StudyError(f"evaluation.{key}.{name} is not a setting here; known: {', '.join(sorted(known))}")


def _check_pretrain_sections(settings: dict, where: str) -> None:
    for section, values in settings.items():
        if section == "config" and where == "pretrain":
            if not isinstance(values, str):
                raise StudyError(f"pretrain.config must be the path of a pretrain.py YAML file, got {values!r}")
            continue
        if section not in SECTION_CLASSES:
            raise StudyError(f"{where}.{section} is not a pretrain.py config section; known: "
                             f"{', '.join(SECTION_CLASSES)}" + (", config" if where == "pretrain" else ""))
        if not isinstance(values, dict):
            raise StudyError(f"{where}.{section} must be a mapping of pretrain.py settings, got {values!r}")
        known = {f.name for f in dataclasses.fields(SECTION_CLASSES[section])}
        for key in values:
            if key not in known:
                raise StudyError(f"{where}.{section}.{key} is not a pretrain.py setting; known in {section}: "
                                 f"{', '.join(sorted(known))}")
            if (section, key) in PLANNER_SETTINGS:
                raise StudyError(f"{where}.{section}.{key} is set by the planner for each run (from "
                                 f"{PLANNER_SETTINGS[(section, key)]}); remove it from the study file")


def validate_study(study: Study) -> None:
    """Every check of the study on its own (each run's pretrain.py settings are checked when planned)."""
    if not study.name or any(c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
                             for c in study.name):
        raise StudyError(f"name {study.name!r} may only use letters, digits and ._- (it names files and jobs)")
    _nonempty_unique(study.sizes, "sizes")
    for size in study.sizes:
        if size not in PRESETS:
            raise StudyError(f"sizes: unknown model preset {size!r}; choose from {', '.join(PRESETS)}")
    _nonempty_unique(study.seeds, "seeds")
    if not study.grids and not study.schedules and not study.phase_arms:
        raise StudyError("grids is missing or empty, and so is schedules, and phase_arms: the study has no arm; "
                         "give at least one grid of budgets and CLM fractions, one schedule of phases, or phase_arms "
                         "over pretrain.config's recipe phases")
    for i, grid in enumerate(study.grids):
        where = f"grids[{i}]"
        _nonempty_unique(grid.budgets, f"{where}.budgets")
        _positive(grid.budgets, f"{where}.budgets")
        if bool(grid.clm_fractions) == bool(grid.switch_steps):
            raise StudyError(f"{where}: give either clm_fractions or switch_steps (one of them, not both)")
        _nonempty_unique(grid.clm_fractions or grid.switch_steps, f"{where}.clm_fractions/switch_steps")
        if any(not 0 <= f <= 1 for f in grid.clm_fractions):
            raise StudyError(f"{where}.clm_fractions must lie in [0, 1] (0 = MLM only, 1 = CLM only), got "
                             f"{grid.clm_fractions}")
        if any(s < 0 for s in grid.switch_steps):
            raise StudyError(f"{where}.switch_steps must be >= 0, got {grid.switch_steps}")
        _check_mask_ratios(grid.mask_ratios, where)
        if grid.seeds:
            _nonempty_unique(grid.seeds, f"{where}.seeds")
    for i, schedule in enumerate(study.schedules):
        _check_schedule(schedule, f"schedules[{i}]")
        if schedule.seeds:
            _nonempty_unique(schedule.seeds, f"schedules[{i}].seeds")
    _check_pretrain_sections(study.pretrain, "pretrain")
    settings = pretrain_settings(study)  # the config file exists and parses
    check_phase_arms(study, settings)
    labels = {arm_label(*arm.spec) for arm in study_arms(study)} | {
        arm.label for arm in phase_arm_specs(study, settings)}
    for i, continuation in enumerate(study.continued_pretraining):
        where = f"continued_pretraining[{i}]"
        _nonempty_unique(continuation.parents, f"{where}.parents")
        for parent in continuation.parents:
            if parent not in labels:
                raise StudyError(f"{where}.parents: no arm {parent!r} in the grids, schedules and phase arms; "
                                 f"they make {', '.join(sorted(labels))}")
        _nonempty_unique(continuation.steps, f"{where}.steps")
        _positive(continuation.steps, f"{where}.steps")
        _check_pretrain_sections(continuation.pretrain, f"{where}.pretrain")
        _check_choice(continuation.objective, ContinuationObjective, f"{where}.objective")
    if study.evaluation is not None:
        _validate_evaluation(study.evaluation)
    for path in study.cost.benchmarks:
        if not study.resolve(path).is_file():
            raise StudyError(f"cost.benchmarks: {study.resolve(path)} not found; give a file written by "
                             "benchmarks/train_step.py --json (relative to the study file)")
    tokens_per_second = study.cost.tokens_per_second
    if tokens_per_second is not None and (not math.isfinite(tokens_per_second) or tokens_per_second <= 0):
        raise StudyError(f"cost.tokens_per_second must be positive, got {study.cost.tokens_per_second}")
    s = study.slurm
    for key in ("nodes", "cpus_per_task"):
        if getattr(s, key) < 1:
            raise StudyError(f"slurm.{key} must be at least 1, got {getattr(s, key)}")
    for key in ("gpus_per_node", "eval_gpus"):  # 0: a CPU partition
        if getattr(s, key) < 0:
            raise StudyError(f"slurm.{key} must be 0 (a CPU partition) or more, got {getattr(s, key)}")
    check_slurm_values(s)
    if study.root is not None:
        check_script_path(study.root, "root")
    if study.claims is not None:
        load_claims(study.resolve(study.claims))  # the table exists and reads


# What SLURM accepts in each value written into an #SBATCH line: these lines are read by sbatch, not by bash, but
# a newline would end the comment and make the rest a command of every job.
_SLURM_NAMES = re.compile(r"[A-Za-z0-9_.\-]+(,[A-Za-z0-9_.\-]+)*")
"""Partitions and accounts: names (a comma-separated list of partitions)."""
_SLURM_TIME = re.compile(r"(\d+(-\d+)?(:\d+){0,2}|UNLIMITED|unlimited|INFINITE|infinite)")
"""Time limits: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
_SLURM_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9\-]*(=[A-Za-z0-9_.,:=@%+/\-\[\]|&*()!]+)?")
"""An #SBATCH option: --name or --name=value (constraint expressions included), one token."""


def check_slurm_values(s: Slurm) -> None:
    """Each value written into an #SBATCH line holds only what SLURM accepts there; a StudyError naming it."""
    checks = [("partition", s.partition, _SLURM_NAMES, "a partition name (letters, digits, _ . -; a,b for several)"),
              ("account", s.account, _SLURM_NAMES, "an account name (letters, digits, _ . -)"),
              ("time", s.time, _SLURM_TIME, "a SLURM time limit (minutes, HH:MM:SS or D-HH:MM:SS)"),
              ("eval_time", s.eval_time, _SLURM_TIME, "a SLURM time limit (minutes, HH:MM:SS or D-HH:MM:SS)")]
    checks += [(f"extra[{i}]", option, _SLURM_OPTION, "one sbatch option as --name or --name=value, without spaces "
                "or quotes") for i, option in enumerate(s.extra)]
    for key, value, pattern, what in checks:
        if value is not None and not pattern.fullmatch(value):
            raise StudyError(f"slurm.{key} is {value!r}; it must be {what} (it is written into every job script)")


def check_script_path(path: str | Path, where: str) -> None:
    """A path written into the emitted job scripts: no control characters (a newline would start a command), and
    none of the characters an #SBATCH line cannot hold (whitespace, quotes, backslash)."""
    text = str(path)
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127 or c in " \t\"'\\"), None)
    if bad is not None:
        raise StudyError(f"{where} {text!r} holds {bad!r}, which a SLURM job script cannot take in a path; "
                         "choose a folder without whitespace, quotes, backslashes or control characters")


def _check_mask_ratios(mask_ratios: list[float], where: str) -> None:
    _nonempty_unique(mask_ratios, f"{where}.mask_ratios")
    if any(not 0 < m < 1 for m in mask_ratios):
        raise StudyError(f"{where}.mask_ratios must lie strictly between 0 and 1, got {mask_ratios}")


def _check_schedule(schedule: Schedule, where: str) -> None:
    """Known phases, none next to itself, one switch per boundary, strictly increasing and inside every budget:
    pretrain.py's own checks (``config.checks``), named by the schedule and budget."""
    phases = schedule.phases
    if not phases:
        raise StudyError(f"{where}.phases is empty; list the objectives in order, e.g. [mlm, clm, mlm]")
    for phase in phases:
        if len(objective_stages(phase)) > 1:
            raise StudyError(f"{where}.phases: {phase} is {len(objective_stages(phase))} phases; list them one by "
                             f"one ([{', '.join(objective_stages(phase))}]) with their switches")
    _nonempty_unique(schedule.budgets, f"{where}.budgets")
    _positive(schedule.budgets, f"{where}.budgets")
    if schedule.switches and schedule.switch_steps:
        raise StudyError(f"{where}: give either switches or switch_steps (one of them, not both)")
    boundaries = len(phases) - 1
    if boundaries and not (schedule.switches or schedule.switch_steps):
        raise StudyError(f"{where}: phases [{', '.join(phases)}] have {boundaries} boundar"
                         f"{'ies' if boundaries > 1 else 'y'}; give switches (fractions of the budget) or "
                         "switch_steps, one per boundary")
    _check_mask_ratios(schedule.mask_ratios, where)
    objective = ",".join(phases)
    for budget in schedule.budgets:
        try:
            check_stages(objective)
            arm = ObjectiveConfig(objective, schedule.switches or None, schedule.switch_steps or None)
            check_switches(arm, Switches.of(arm, budget))
        except ConfigError as err:
            raise StudyError(f"{where} (phases [{', '.join(phases)}], budget {budget}): {err}") from None


def _validate_evaluation(e: Evaluation) -> None:
    _nonempty_unique(e.tasks, "evaluation.tasks")
    _nonempty_unique(e.lrs, "evaluation.lrs")
    if any(not math.isfinite(lr) or lr <= 0 for lr in e.lrs):
        raise StudyError(f"evaluation.lrs must be positive, got {e.lrs}")
    _nonempty_unique(e.seeds, "evaluation.seeds")
    if e.random_init_seeds:
        _nonempty_unique(e.random_init_seeds, "evaluation.random_init_seeds")
    _positive(e.checkpoint_steps, "evaluation.checkpoint_steps")
    if e.checkpoint_steps and len(set(e.checkpoint_steps)) != len(e.checkpoint_steps):
        raise StudyError(f"evaluation.checkpoint_steps lists a step twice: {e.checkpoint_steps}")
    _check_choice(e.export_arch, ExportArch, "evaluation.export_arch")
    _check_choice(e.tie_rule, TieRule, "evaluation.tie_rule")
    if e.retrieval_corpus not in RETRIEVAL_CORPORA:
        raise StudyError(f"evaluation.retrieval_corpus is {e.retrieval_corpus!r}; choose one of "
                         f"{', '.join(RETRIEVAL_CORPORA)}")
    for key in ("max_train_examples", "max_eval_examples"):
        if getattr(e, key) < 0:
            raise StudyError(f"evaluation.{key} must be >= 0 (0 = all), got {getattr(e, key)}")
    if not math.isfinite(e.informative_margin) or e.informative_margin < 0:
        raise StudyError(f"evaluation.informative_margin must be a finite number of score points >= 0, got "
                         f"{e.informative_margin}; e.g. 1.0 (an arm must beat random init and the best trivial "
                         "baseline by more than 1 point on validation)")


def check_run_needs(study: Study) -> None:
    """What ``tools/plan_study.py --run`` needs on this machine beyond the study file, all checked before its first
    step (the evaluations come after hours of pretraining): scikit-learn for the random-init baselines' trivial
    baselines, datasets for the paper's sets, and the data folder's file of every local task (``TASK_FILES``), every
    TYPE:PATH folder and the ``hf_datasets_dir``. A StudyError names everything missing in one line."""
    e = study.evaluation
    if e is None:
        return
    packages = [("sklearn", "the random-init baselines' trivial baselines")]
    if any(task in PAPER_DATASETS for task in e.tasks):
        packages.append(("datasets", "the paper's datasets"))
    missing = [f"the {extras.extra(name).distribution} package for {purpose} ({extras.install_command(name)})"
               for name, purpose in packages if not extras.installed(name)]
    data_dir = study.resolve(e.data_dir) if e.data_dir else default_data_dir()
    for task in e.tasks:
        kind, colon, folder = task.partition(":")
        if task in TASK_FILES and not (data_dir / TASK_FILES[task]).is_file():
            missing.append(f"{TASK_FILES[task]} under the data folder {data_dir} for task {task} (set "
                           f"evaluation.data_dir, or ${DATA_DIR_ENV}, to the folder that holds it)")
        elif colon and task not in PAPER_DATASETS and not Path(folder).is_dir():
            missing.append(f"the folder {folder} of task {task}")
    if e.hf_datasets_dir and not study.resolve(e.hf_datasets_dir).is_dir():
        missing.append(f"evaluation.hf_datasets_dir {study.resolve(e.hf_datasets_dir)} (fill it with "
                       "tools/fetch_eval_datasets.py --save-to)")
    if missing:
        raise StudyError(f"--run would train and then fail its evaluations: missing {'; '.join(missing)}; nothing "
                         "was run")


def _nonempty_unique(values: list, where: str) -> None:
    if not values:
        raise StudyError(f"{where} is empty; list at least one value")
    if len(set(values)) != len(values):
        raise StudyError(f"{where} lists a value twice: {values}")


def _positive(values: list, where: str) -> None:
    if any(v <= 0 for v in values):
        raise StudyError(f"{where} must be positive, got {values}")


def _check_choice(value, choices, where: str) -> None:
    """A Literal-typed key holds one of its choices (the converter checks types only)."""
    options = get_args(choices)
    if value not in options:
        raise StudyError(f"{where} is {value!r}; choose one of {', '.join(map(str, options))}")
