"""The study file (YAML): the grid of encoders to pretrain, the settings they share, and how to evaluate them.

Every field below is a key of the file; the string under it is its documentation. ``load_study`` reads a file
into a ``Study`` and checks it completely, raising one ``StudyError`` naming the key and the fix, before any
plan is made. Paths the planner reads itself (``pretrain.config``, ``cost.benchmarks``, ``report``) are
relative to the study file; the settings under ``pretrain`` are pretrain.py settings, passed to it as written
(data paths are relative to the folder runs are launched from).

Keys set with ``--set KEY=VALUE`` (YAML values, e.g. ``--set seeds=[1] --set evaluation.lrs=[1e-3]``) replace
the file's before the checks; ``--scale F`` multiplies every step count (``scale_steps``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from megamlm.config import ALTERNATIVES, SECTION_CLASSES, ConfigError, field_docs, load_yaml, read_yaml, yaml_problem
from megamlm.errors import UserError
from megamlm.eval.finetune import Hyperparameters
from megamlm.eval.paper_datasets import RETRIEVAL_CORPORA
from megamlm.eval.runner import PAPER_LRS, PAPER_SEEDS
from megamlm.eval.tasks import TaskSettings
from megamlm.model.config import PRESETS
from megamlm.study.naming import arm_label

ContinuationObjective = Literal["mlm", "clm"]
ExportArch = Literal["eurobert", "llama", "gemma3_encoder"]

# pretrain.py settings the planner sets for each run from the grid: (section, key) -> the study key that sets it.
PLANNER_SETTINGS = {
    ("model", "model"): "sizes", ("objective", "objective"): "grids[].clm_fractions / switch_steps",
    ("objective", "switch"): "grids[].clm_fractions / switch_steps",
    ("objective", "switch_step"): "grids[].clm_fractions / switch_steps", ("objective", "mask_ratio"): "grids[].mask_ratios",
    ("training", "train_iters"): "grids[].budgets", ("training", "seed"): "seeds",
    ("checkpoint", "save"): "--root", ("checkpoint", "load"): "the plan (branches)",
    ("checkpoint", "continue_from"): "continued_pretraining", ("checkpoint", "init_from"): "the plan",
    ("checkpoint", "save_at"): "the plan (branch points) and evaluation.checkpoint_steps",
    ("training", "exit_interval"): "the SLURM scripts (TARGET_STEP)",
}
# pretrain.py settings counted in steps, multiplied by --scale.
STEP_SETTINGS = (("training", "lr_warmup_iters"), ("training", "lr_wsd_decay_iters"), ("validation", "eval_interval"),
                 ("checkpoint", "save_interval"), ("logging", "log_interval"))


class StudyError(UserError, ValueError):
    """A study file that cannot be planned; the message names the key and the fix."""


@dataclass
class Grid:
    budgets: list[int]
    """Steps of each model (pretrain.py --train-iters)."""
    clm_fractions: list[float] = field(default_factory=list)
    """Share of the budget trained with CLM before switching to MLM: 0 = MLM only, 1 = CLM only, else CLM then MLM
    switching after step round(fraction x budget)."""
    switch_steps: list[int] = field(default_factory=list)
    """Instead of clm_fractions: CLM for the first N steps, then MLM (0 = MLM only; N >= budget = CLM only)."""
    mask_ratios: list[float] = field(default_factory=lambda: [0.4])
    """MLM mask ratios, each its own arm (runs branch from each other only at the same mask ratio)."""
    reproduces_paper: bool = False
    """True: this grid's arms are models the paper trained (arXiv 2507.00994, at this size, budget and mask ratio);
    the planner's table then marks every run `paper` or `extension` (an arm any marked grid holds is the paper's)."""


@dataclass
class Continuation:
    parents: list[str]
    """Arms to continue from their last (decayed) checkpoint, named without size and seed (e.g. clm42k-m40);
    the continuation takes the parent's weights, a fresh optimizer and LR schedule, and the next samples of its
    stream (pretrain.py --continue-from)."""
    steps: list[int]
    """Steps of each continuation (one arm per parent and length)."""
    objective: ContinuationObjective = "mlm"
    """Objective of the continued pretraining."""
    reproduces_paper: bool = False
    """True: these continuations are models the paper trained (as grids[].reproduces_paper)."""
    pretrain: dict = field(default_factory=dict)
    """pretrain.py settings of these runs on top of the study's (sections as in pretrain: e.g. training:
    {lr_warmup_fraction: 0.05, lr_wsd_decay_fraction: 0.1})."""


@dataclass
class Evaluation:
    tasks: list[str]
    """Fine-tuning tasks (tools/evaluate.py --tasks names: the paper's 12 datasets, local tasks, TYPE:PATH)."""
    lrs: list[float] = field(default_factory=lambda: list(PAPER_LRS))
    """Fine-tuning learning-rate grid."""
    seeds: list[int] = field(default_factory=lambda: list(PAPER_SEEDS))
    """Fine-tuning seeds (the protocol's mean and 95% CI are over these)."""
    checkpoint_steps: list[int] = field(default_factory=list)
    """Steps whose checkpoints are evaluated too (score against pretraining steps): each is kept from --keep-last
    and evaluated in the run that trains that step."""
    hyperparameters: dict = field(default_factory=dict)
    """Fine-tuning settings (megamlm.eval.finetune.Hyperparameters: batch_size, micro_batch_size, max_steps, ...)."""
    task_settings: dict = field(default_factory=dict)
    """Task settings (megamlm.eval.tasks.TaskSettings: max_length, doc_stride, max_query_length, ...)."""
    max_train_examples: int = 0
    """At most this many train examples per task (a fixed subset); 0 = all."""
    max_eval_examples: int = 0
    """At most this many validation and test examples per task; 0 = all."""
    data_dir: str | None = None
    """Folder of the local tasks' labelled sets (default: ../shared/data beside the repository)."""
    hf_datasets_dir: str | None = None
    """Folder of save_to_disk copies of the paper's datasets (tools/fetch_eval_datasets.py --save-to)."""
    retrieval_corpus: str = "judged"
    """The paper's retrieval sets: judged (EncodEval's corpus) or full."""
    export_arch: ExportArch = "eurobert"
    """Hugging Face architecture the checkpoints are exported as: eurobert, llama, or gemma3_encoder (a study of
    encoders continued from Gemma 3, exported as the native bidirectional Gemma 3)."""


@dataclass
class Cost:
    tokens_per_second: float | None = None
    """Training tokens per second of one GPU, for every size and objective (--tokens-per-second wins)."""
    benchmarks: list[str] = field(default_factory=list)
    """benchmarks/train_step.py result files (--json) whose megamlm_tokens_per_s prices the runs of their preset and
    objective (relative to the study file)."""


@dataclass
class Slurm:
    nodes: int = 1
    """Nodes per pretraining job."""
    gpus_per_node: int = 8
    """GPUs per node (one rank each); 0 for a CPU partition (ranks from the allocation's CPUs, --device cpu)."""
    cpus_per_task: int = 64
    """CPUs of the one task per node (torchrun and its ranks)."""
    time: str = "24:00:00"
    """Time limit of each pretraining job (a longer run is requeued from its checkpoint)."""
    partition: str | None = None
    """SLURM partition (none: the cluster's default)."""
    account: str | None = None
    """SLURM account (none: yours by default)."""
    extra: list[str] = field(default_factory=list)
    """More #SBATCH options for every job, e.g. ["--qos=high", "--constraint=h100"]."""
    eval_gpus: int = 8
    """GPUs of each evaluation job (one node; one fine-tuning worker per GPU); 0: one worker on the CPUs."""
    eval_time: str = "48:00:00"
    """Time limit of each evaluation job."""


@dataclass
class Study:
    name: str
    """The study's name (file names, job names)."""
    sizes: list[str]
    """Model presets (tiny, 210m, 610m, 1b)."""
    grids: list[Grid]
    """The arms trained from scratch: each grid is budgets x CLM fractions (or switch steps) x mask ratios; the
    study is their union."""
    seeds: list[int] = field(default_factory=lambda: [1234])
    """Pretraining seeds: each arm is trained once per seed (weights, sample order and masks)."""
    pretrain: dict = field(default_factory=dict)
    """pretrain.py settings shared by every run: `config` (a pretrain.py YAML file, relative to the study file) and
    config sections (model, data, training, checkpoint, logging, validation, parallel, performance), which win over
    the file's."""
    continued_pretraining: list[Continuation] = field(default_factory=list)
    """Continued-pretraining arms from finished arms."""
    evaluation: Evaluation | None = None
    """Fine-tuning after each run (none: pretraining only)."""
    cost: Cost = field(default_factory=Cost)
    """Where GPU-hour estimates come from."""
    slurm: Slurm = field(default_factory=Slurm)
    """Resources of the emitted SLURM jobs."""
    root: str | None = None
    """Folder of the runs, exports, evaluations and report (default runs/NAME; --root wins)."""
    report: str | None = None
    """Where the report is written (a Markdown file, relative to the study file; its figures go beside it in
    figures/); default ROOT/report/REPORT.md."""
    source: Path = field(default=Path("."), metadata={"internal": True})
    """The study file (set by load_study)."""
    scale: float = field(default=1.0, metadata={"internal": True})
    """The --scale every step count was multiplied by (set by load_study): below 1 the study is a rehearsal."""
    own_report: str | None = field(default=None, metadata={"internal": True})
    """The study file's own report key, before any --set (a rehearsal never writes there)."""

    @property
    def is_rehearsal(self) -> bool:
        """A smaller copy of the study (--scale < 1): it rehearses the pipeline and answers none of its questions."""
        return self.scale < 1

    @property
    def default_root(self) -> str:
        return self.root or f"runs/{self.name}"

    def resolve(self, path: str) -> Path:
        """A path given in the study file, relative to the file."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.source.parent / p


# ---- reading -------------------------------------------------------------------------------------------------


def load_study(path: str | Path, overrides: list[str] = (), scale: float | None = None) -> Study:
    """Read, override (``--set KEY=VALUE``), scale and check a study file; raises StudyError."""
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"study file {path} not found; pass the path of a study YAML (see examples/studies/)")
    try:
        data = read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise StudyError(f"{path} is not UTF-8 text (byte {err.start}); pass a study YAML file") from None
    except yaml.YAMLError as err:
        raise StudyError(f"{path} is not valid YAML{yaml_problem(err)}") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path} must hold a mapping of study keys (name, sizes, grids, ...)")
    own_report = data.get("report")
    for override in overrides:
        apply_override(data, override)
    study = _convert(data, Study, "")
    study.source = path.resolve()
    study.own_report = own_report if isinstance(own_report, str) else None
    if scale is not None:
        scale_steps(study, scale)
        study.scale = scale
    validate_study(study)
    return study


def apply_override(data: dict, override: str) -> None:
    """``KEY=VALUE`` with a dotted key (``evaluation.lrs``) and a YAML value (``[1e-3]``)."""
    key, sep, text = override.partition("=")
    if not sep or not key:
        raise StudyError(f"--set {override!r}: write KEY=VALUE, e.g. --set seeds=[1] or --set evaluation.lrs=[1e-3]")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise StudyError(f"--set {override!r}: {text!r} is not a YAML value") from None
    target = data
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise StudyError(f"--set {override!r}: {part} is not a mapping in the study file")
    target[parts[-1]] = value


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _convert(value: Any, hint, where: str):
    """``value`` as ``hint`` (a dataclass, list[...], X | None, Literal, int, float, str, bool, dict)."""
    origin, args = get_origin(hint), get_args(hint)
    name = where or "the study file"
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, where)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise StudyError(f"{name} must be a mapping of keys ({', '.join(_fields(hint))}), got {value!r}")
        known = _fields(hint)
        for key in value:
            if key not in known:
                raise StudyError(f"{_join(where, key)} is not a study key; known here: {', '.join(known)}")
        hints = get_type_hints(hint)
        kwargs = {}
        for f in dataclasses.fields(hint):
            if f.name not in known:
                continue
            if f.name in value:
                kwargs[f.name] = _convert(value[f.name], hints[f.name], _join(where, f.name))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise StudyError(f"{_join(where, f.name)} is missing: {field_docs(hint).get(f.name, '')}")
        return hint(**kwargs)
    if origin is list:
        if not isinstance(value, list):
            raise StudyError(f"{name} must be a list (YAML [a, b]), got {value!r}")
        return [_convert(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is Literal:
        if value not in args:
            raise StudyError(f"{name} is {value!r}; choose one of {', '.join(map(str, args))}")
        return value
    if hint is dict:
        if not isinstance(value, dict):
            raise StudyError(f"{name} must be a mapping, got {value!r}")
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise StudyError(f"{name} must be a finite number, got {value!r}")
        return float(value)
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    quote = " (quote it in YAML)" if hint is str else ""
    raise StudyError(f"{name} must be {_type_name(hint)}{quote}, got {value!r}")


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)


# ---- scaling -------------------------------------------------------------------------------------------------


def scaled(steps: int, factor: float) -> int:
    return max(1, round(steps * factor))


def scale_steps(study: Study, factor: float) -> None:
    """Multiply every step count of the study by ``factor`` (a smaller copy of the same plan): budgets, switch
    steps, continuation lengths, evaluated checkpoints, fine-tuning steps, and the pretrain settings counted in
    steps (warmup and decay iterations, validation, save and log intervals), the base config's included."""
    if not 0 < factor <= 1:
        raise StudyError(f"--scale must be in (0, 1], got {factor}")
    labels_before = [arm_label(*arm) for grid in study.grids for arm in grid_arms(grid)]
    for grid in study.grids:
        grid.budgets = [scaled(b, factor) for b in grid.budgets]
        grid.switch_steps = [0 if s == 0 else scaled(s, factor) for s in grid.switch_steps]
    renamed = dict(zip(labels_before, [arm_label(*arm) for grid in study.grids for arm in grid_arms(grid)]))
    for continuation in study.continued_pretraining:
        continuation.parents = [renamed.get(parent, parent) for parent in continuation.parents]
        continuation.steps = [scaled(s, factor) for s in continuation.steps]
        _scale_settings(continuation.pretrain, factor)
    if study.evaluation is not None:
        study.evaluation.checkpoint_steps = [scaled(s, factor) for s in study.evaluation.checkpoint_steps]
        steps = study.evaluation.hyperparameters.get("max_steps")
        if isinstance(steps, int) and steps > 0:
            study.evaluation.hyperparameters["max_steps"] = scaled(steps, factor)
    base = pretrain_settings(study)
    scaled_base = {section: dict(values) for section, values in base.items()}
    _scale_settings(scaled_base, factor)
    for section, values in scaled_base.items():
        for key, value in values.items():
            if value != base[section].get(key):
                study.pretrain.setdefault(section, {})[key] = value


def _scale_settings(settings: dict, factor: float) -> None:
    for section, key in STEP_SETTINGS:
        value = (settings.get(section) or {}).get(key)
        if isinstance(value, int) and value > 0:
            settings[section][key] = scaled(value, factor)


# ---- pretrain settings ---------------------------------------------------------------------------------------


def pretrain_settings(study: Study) -> dict[str, dict]:
    """The study's pretrain.py settings as config sections: its ``config`` file, then its own sections."""
    settings = {section: {} for section in SECTION_CLASSES}
    config = study.pretrain.get("config")
    if config is not None:
        path = study.resolve(str(config))
        try:
            base = load_yaml(str(path))
        except ConfigError as err:
            raise StudyError(f"pretrain.config: {err}") from None
        defaults = type(base)().to_dict()
        for section, values in base.to_dict().items():
            settings[section].update({k: v for k, v in values.items() if v != defaults[section][k]})
    return merge_settings(settings, {k: v for k, v in study.pretrain.items() if k != "config"})


def merge_settings(base: dict[str, dict], override: dict) -> dict[str, dict]:
    """``override``'s sections on top of ``base``'s; a setting given one way (--lr-warmup-fraction) replaces its
    alternative (--lr-warmup-iters) from ``base``."""
    merged = {section: dict(values) for section, values in base.items()}
    for section, values in (override or {}).items():
        for key, value in (values or {}).items():
            merged.setdefault(section, {})[key] = value
            for pair_section, *pair in ALTERNATIVES:
                if pair_section == section and key in pair:
                    merged[section].pop(pair[1] if key == pair[0] else pair[0], None)
    return merged


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


def _check_dict_fields(values: dict, cls, where: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)} - {"lr", "seed", "eurobert_inputs"}  # tools/evaluate.py flags
    for key in values:
        if key not in known:
            raise StudyError(f"{where}.{key} is not a setting here; known: {', '.join(sorted(known))}")


# ---- checks --------------------------------------------------------------------------------------------------


def grid_arms(grid: Grid) -> list[tuple[str, int, int | None, float]]:
    """(objective, budget, switch step, mask ratio) of every arm of a grid."""
    arms = []
    for mask_ratio in grid.mask_ratios:
        for budget in grid.budgets:
            switches = ([round(f * budget) for f in grid.clm_fractions] if grid.clm_fractions
                        else list(grid.switch_steps))
            for switch in switches:
                if switch <= 0:
                    arms.append(("mlm", budget, None, mask_ratio))
                elif switch >= budget:
                    arms.append(("clm", budget, None, mask_ratio))
                else:
                    arms.append(("clm_then_mlm", budget, switch, mask_ratio))
    return arms


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
    if not study.grids:
        raise StudyError("grids is empty; give at least one grid of budgets and CLM fractions")
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
        _nonempty_unique(grid.mask_ratios, f"{where}.mask_ratios")
        if any(not 0 < m < 1 for m in grid.mask_ratios):
            raise StudyError(f"{where}.mask_ratios must lie strictly between 0 and 1, got {grid.mask_ratios}")
    _check_pretrain_sections(study.pretrain, "pretrain")
    pretrain_settings(study)  # the config file exists and parses
    labels = {arm_label(*arm) for grid in study.grids for arm in grid_arms(grid)}
    for i, continuation in enumerate(study.continued_pretraining):
        where = f"continued_pretraining[{i}]"
        _nonempty_unique(continuation.parents, f"{where}.parents")
        for parent in continuation.parents:
            if parent not in labels:
                raise StudyError(f"{where}.parents: no arm {parent!r} in the grids; the grids make "
                                 f"{', '.join(sorted(labels))}")
        _nonempty_unique(continuation.steps, f"{where}.steps")
        _positive(continuation.steps, f"{where}.steps")
        _check_pretrain_sections(continuation.pretrain, f"{where}.pretrain")
    if study.evaluation is not None:
        _validate_evaluation(study.evaluation)
    for path in study.cost.benchmarks:
        if not study.resolve(path).is_file():
            raise StudyError(f"cost.benchmarks: {study.resolve(path)} not found; give a file written by "
                             "benchmarks/train_step.py --json (relative to the study file)")
    if study.cost.tokens_per_second is not None and study.cost.tokens_per_second <= 0:
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


def _validate_evaluation(e: Evaluation) -> None:
    _nonempty_unique(e.tasks, "evaluation.tasks")
    _nonempty_unique(e.lrs, "evaluation.lrs")
    if any(lr <= 0 for lr in e.lrs):
        raise StudyError(f"evaluation.lrs must be positive, got {e.lrs}")
    _nonempty_unique(e.seeds, "evaluation.seeds")
    _positive(e.checkpoint_steps, "evaluation.checkpoint_steps")
    if e.checkpoint_steps and len(set(e.checkpoint_steps)) != len(e.checkpoint_steps):
        raise StudyError(f"evaluation.checkpoint_steps lists a step twice: {e.checkpoint_steps}")
    _check_dict_fields(e.hyperparameters, Hyperparameters, "evaluation.hyperparameters")
    _check_dict_fields(e.task_settings, TaskSettings, "evaluation.task_settings")
    if e.retrieval_corpus not in RETRIEVAL_CORPORA:
        raise StudyError(f"evaluation.retrieval_corpus is {e.retrieval_corpus!r}; choose one of "
                         f"{', '.join(RETRIEVAL_CORPORA)}")
    for key in ("max_train_examples", "max_eval_examples"):
        if getattr(e, key) < 0:
            raise StudyError(f"evaluation.{key} must be >= 0 (0 = all), got {getattr(e, key)}")


def _nonempty_unique(values: list, where: str) -> None:
    if not values:
        raise StudyError(f"{where} is empty; list at least one value")
    if len(set(values)) != len(values):
        raise StudyError(f"{where} lists a value twice: {values}")


def _positive(values: list, where: str) -> None:
    if any(v <= 0 for v in values):
        raise StudyError(f"{where} must be positive, got {values}")


# ---- documentation -------------------------------------------------------------------------------------------


def key_reference() -> str:
    """Every study key with its documentation, as a Markdown table (examples/studies/README.md prints it)."""
    lines = ["| key | meaning |", "|---|---|"]
    sections = (("", Study), ("grids[].", Grid), ("continued_pretraining[].", Continuation),
                ("evaluation.", Evaluation), ("cost.", Cost), ("slurm.", Slurm))
    for prefix, cls in sections:
        docs = field_docs(cls)
        for name in _fields(cls):
            text = " ".join(docs.get(name, "").split()).replace("|", "\\|")
            lines.append(f"| `{prefix}{name}` | {text} |")
    return "\n".join(lines) + "\n"
