"""Every check of a Config on its own, one function per section, run once by ``resolve.py`` before any work.

Each raises ConfigError naming the fix. Also here: the checks of what a Hugging Face ``--init-from`` model lends
the Config while it is resolved (megamlm/hf/init_from.py). What needs the launch itself (the layout against the
world size, the device, installed packages, compile and float8 constraints, the data and tokenizer) is checked
by the start-up check phase, megamlm/training/startup.py; no other module raises ConfigError.
"""

from __future__ import annotations

import dataclasses
import math
from typing import get_type_hints

from megamlm.config import rampup
from megamlm.config.derived import DEFAULT_SWITCH, SHAPE_FIELDS, DerivedValues, Switches, objective_stages
from megamlm.config.docs import choices_of
from megamlm.config.loader import ALTERNATIVES
from megamlm.config.sections import (
    OBJECTIVE_STAGES,
    PHASE_OBJECTIVES,
    SECTION_CLASSES,
    CheckpointConfig,
    Config,
    ModelConfig,
    ObjectiveConfig,
    PerformanceConfig,
)
from megamlm.config.setting_checks import RANGES, masking_problem, setting_problem
from megamlm.errors import ConfigError
from megamlm.extras import installed, missing_message
from megamlm.model.attention_table import attention_backend_problem
from megamlm.model.config import LAYER_TYPES, PRESETS

LARGEST_INT = 2**63 - 1
"""Every count a run keeps (steps, samples, tokens, seeds) is a 64-bit integer in numpy, torch and checkpoints."""
MAX_TIMEOUT_MINUTES = 525_600
"""--distributed-timeout-minutes at most a year: torch converts it to a timedelta and to milliseconds."""


def validate(cfg: Config) -> None:
    """Every check of the config on its own, before any work starts. Raises ConfigError naming the fix. What the
    checks read that is computed from the settings (the shape, the switch steps, ...) is computed once, when the
    numbers and choices it is computed from are checked, and handed to them (``DerivedValues``)."""
    _check_numbers(cfg)
    if cfg.model.model not in PRESETS:
        raise ConfigError(f"unknown --model {cfg.model.model!r}; choose one of {', '.join(PRESETS)}")
    _check_choices(cfg)
    values = DerivedValues.of(cfg)
    check_model(cfg.model, values.shape)
    _check_alternatives(cfg)
    check_stages(cfg.objective.objective)
    check_switches(cfg.objective, values.switches)
    check_training(cfg, values)
    if cfg.logging.log_interval <= 0:
        raise ConfigError("--log-interval must be positive")
    check_checkpoint(cfg)
    check_stopping(cfg)
    if cfg.data.num_workers < 0:
        raise ConfigError("--num-workers must be >= 0")
    check_sample_mode(cfg, values.shape["seq_length"])
    check_validation(cfg, values)
    check_parallel(cfg)
    check_performance(cfg.performance)


def _check_numbers(cfg: Config) -> None:
    """Every number finite, and the ones with a natural range inside it (config/setting_checks.py: a recipe phase's
    value of the same setting gets the same check)."""
    for section, cls in SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            value = getattr(getattr(cfg, section), f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"--{f.name.replace('_', '-')} must be a finite number, got {value}")
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, int) and not isinstance(item, bool) and not -LARGEST_INT <= item <= LARGEST_INT:
                    raise ConfigError(f"--{f.name.replace('_', '-')} {item} is beyond the 64-bit integers it is held "
                                      f"in (at most {LARGEST_INT:,} either way); give a smaller number")
    o = cfg.objective
    problems = (setting_problem(section, name, getattr(getattr(cfg, section), name)) for section, name in RANGES)
    problem = next((p for p in problems if p), None) or masking_problem(
        (o.mask_replace_prob, o.mask_random_prob, o.mask_keep_prob))
    if problem:
        raise ConfigError(problem)
    t = cfg.training
    if t.min_lr > t.lr:
        raise ConfigError(f"--min-lr {t.min_lr} is above the peak --lr {t.lr}; the decay ends at --min-lr, so lower "
                          "it (or raise --lr)")


def _check_choices(cfg: Config) -> None:
    """A Literal field set from YAML (flags are checked by the parser) must hold one of its values."""
    for section, cls in SECTION_CLASSES.items():
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            choices = choices_of(hints[f.name])
            value = getattr(getattr(cfg, section), f.name)
            for item in value if isinstance(value, list) else [value]:  # a list of choices checks each
                if choices is not None and item not in choices and item is not None:
                    raise ConfigError(f"unknown --{f.name.replace('_', '-')} {item!r}; choose one of "
                                      f"{', '.join(map(str, choices))}")


def _check_alternatives(cfg: Config) -> None:
    for section, first, second in ALTERNATIVES:
        values = getattr(cfg, section)
        if getattr(values, first) is not None and getattr(values, second) is not None:
            raise ConfigError(f"--{first.replace('_', '-')} and --{second.replace('_', '-')} give the same setting "
                              "two ways; pass one of them")


def check_model(m: ModelConfig, shape: dict) -> None:
    """The model section against its resolved ``shape`` (``--rope-scaling`` is parsed with it: DerivedValues)."""
    if shape["num_attention_heads"] % shape["num_query_groups"]:
        raise ConfigError(
            f"--num-attention-heads {shape['num_attention_heads']} is not divisible by --num-query-groups "
            f"{shape['num_query_groups']}; choose a number of KV heads that divides the number of heads")
    if m.head_dim is None and shape["hidden_size"] % shape["num_attention_heads"]:
        raise ConfigError(f"--hidden-size {shape['hidden_size']} is not divisible by --num-attention-heads "
                          f"{shape['num_attention_heads']}; pick divisible sizes or set --head-dim")
    head_dim = m.head_dim if m.head_dim is not None else shape["hidden_size"] // shape["num_attention_heads"]
    if head_dim <= 0 or head_dim % 2:
        raise ConfigError(f"the head dimension ({head_dim}) must be positive and even for rotary embeddings")
    for name in SHAPE_FIELDS:
        if name != "vocab_size" and shape[name] <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {shape[name]}")
    if m.layer_types is not None:
        kinds = m.layer_types.split(",")
        if len(kinds) != shape["num_layers"]:
            raise ConfigError(f"--layer-types names {len(kinds)} layers and --num-layers is {shape['num_layers']}; "
                              "give one type (full or sliding) per layer")
        if set(kinds) - set(LAYER_TYPES) or ("sliding" in kinds and not m.sliding_window):
            raise ConfigError(f"--layer-types {m.layer_types}: each layer is full or sliding, and sliding layers "
                              "need --sliding-window")
    if m.sliding_window is not None and m.sliding_window < 1:
        raise ConfigError(f"--sliding-window must be at least 1, got {m.sliding_window}")


def check_stages(objective: str) -> None:
    """A named objective, or known stages joined by commas with no stage repeated next to itself."""
    stages = objective_stages(objective)
    if objective not in OBJECTIVE_STAGES and (not objective or set(stages) - set(PHASE_OBJECTIVES)):
        raise ConfigError(f"unknown --objective {objective!r}; choose one of {', '.join(OBJECTIVE_STAGES)}, or stages "
                          f"of {', '.join(PHASE_OBJECTIVES)} joined by commas (e.g. mlm,clm,mlm)")
    for number, (a, b) in enumerate(zip(stages, stages[1:]), start=1):
        if a == b:
            raise ConfigError(f"--objective {objective} trains {a} in stages {number} and {number + 1} next to each "
                              f"other; make them one stage (drop that stage and its switch)")


def check_switches(o: ObjectiveConfig, switches: Switches) -> None:
    """One switch per boundary between stages, strictly increasing and inside the run (no stage left empty)."""
    stages, fractions, given = switches.stages, switches.fractions, switches.given_steps
    steps, train_iters = switches.steps, switches.train_iters
    flag, values = ("--switch-step", given) if o.switch_step is not None else ("--switch", fractions)
    shown_values = values or ((DEFAULT_SWITCH,) if len(stages) == 2 else ())
    shown = f"{flag} {','.join(map(str, shown_values))}"
    if any(not 0.0 < f < 1.0 for f in fractions):
        bad = next(f for f in fractions if not 0.0 < f < 1.0)
        raise ConfigError(f"--switch must be a fraction strictly between 0 and 1, got {bad}")
    if values and len(stages) == 1:
        two_stage = ", ".join(name for name, named in OBJECTIVE_STAGES.items() if len(named) == 2)
        raise ConfigError(f"{flag} places the objective switch, but --objective {o.objective} has one objective "
                          f"and no switch; drop {flag}, or pick a two-stage objective ({two_stage}) or a stage "
                          "sequence (e.g. mlm,clm,mlm)")
    needed = len(stages) - 1
    if needed > 1 and len(values) != needed or needed == 1 and len(values) > 1:
        raise ConfigError(f"--objective {o.objective} has {len(stages)} stages, so {needed} switch"
                          f"{'es' if needed > 1 else ''}, but {flag} gives {len(values)}; give one per boundary "
                          f"(e.g. --switch {','.join(str(round((k + 1) / (needed + 1), 2)) for k in range(needed))})")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ConfigError(f"{shown} is not strictly increasing; give each stage's end after the one before it")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ConfigError(f"{shown} with --train-iters {train_iters} puts two switches at steps "
                          f"{','.join(map(str, steps))}, leaving a stage empty; raise --train-iters or spread the "
                          "switches")
    for step in steps:
        if not 0 < step < train_iters:
            where = "the switch" if len(steps) == 1 else "a switch"
            raise ConfigError(f"{shown} with --train-iters {train_iters} puts {where} at step {step}, leaving one "
                              "stage empty; raise --train-iters or move the switch")


def check_training(cfg: Config, values: DerivedValues) -> None:
    t = cfg.training
    if t.train_iters <= 0:
        raise ConfigError(f"--train-iters must be positive, got {t.train_iters}")
    for flag, value in (("--micro-batch-size", t.micro_batch_size), ("--global-batch-size", t.global_batch_size)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}")
    tokens = t.train_iters * (t.global_batch_size or 1) * (values.shape["seq_length"] or 1)
    if tokens > LARGEST_INT:
        raise ConfigError(f"--train-iters {t.train_iters:,} x --global-batch-size {t.global_batch_size:,} x "
                          f"--seq-length is {tokens:,} tokens, beyond the 64-bit counts of samples and tokens; "
                          "shorten the run")
    if t.micro_batch_size and t.global_batch_size and t.global_batch_size % t.micro_batch_size:
        raise ConfigError(f"--global-batch-size {t.global_batch_size} is not divisible by --micro-batch-size "
                          f"{t.micro_batch_size}; pick a global batch that is a multiple of the micro-batch")
    if ramp_problem := rampup.problem(t.rampup_batch_size, t.global_batch_size):
        raise ConfigError(ramp_problem)
    check_optimizer(cfg)
    if t.lr_warmup_fraction is not None and not 0.0 <= t.lr_warmup_fraction < 1.0:
        raise ConfigError(f"--lr-warmup-fraction must be in [0, 1), got {t.lr_warmup_fraction}")
    if t.lr_wsd_decay_fraction is not None and not 0.0 < t.lr_wsd_decay_fraction <= 1.0:
        raise ConfigError(f"--lr-wsd-decay-fraction must be in (0, 1], got {t.lr_wsd_decay_fraction}")
    if t.lr_decay_style == "constant" and t.min_lr > 0:
        raise ConfigError(f"--min-lr {t.min_lr} is where the learning rate decays to, but --lr-decay-style constant "
                          "never decays; drop --min-lr, or pick wsd, cosine or linear")
    warmup, decay = values.warmup_iters, values.wsd_decay_iters
    if warmup + (decay if t.lr_decay_style == "wsd" else 0) > t.train_iters:
        raise ConfigError(f"warmup ({warmup}) plus decay ({decay}) steps exceed --train-iters {t.train_iters}; "
                          "lower --lr-warmup-iters / --lr-wsd-decay-iters, or give them as fractions of the run "
                          "(--lr-warmup-fraction / --lr-wsd-decay-fraction)")
    if t.max_skipped_steps < 1:
        raise ConfigError(f"--max-skipped-steps must be at least 1, got {t.max_skipped_steps}")


def check_optimizer(cfg: Config) -> None:
    """StableAdamW comes from torch-optimi (looked up, never imported, here) and has one implementation."""
    if cfg.training.optimizer != "stableadamw":
        return
    if not installed("optimi"):
        raise ConfigError(missing_message("optimi", "--optimizer stableadamw") + ", or use --optimizer adamw")
    if cfg.performance.optimizer_impl != "torch":
        raise ConfigError(f"--optimizer-impl {cfg.performance.optimizer_impl} picks AdamW's kernel, and "
                          "--optimizer stableadamw has torch-optimi's only: drop --optimizer-impl, or use "
                          "--optimizer adamw")


def check_checkpoint(cfg: Config) -> None:
    c, planning = cfg.checkpoint, cfg.parallel.dry_run  # a dry run writes nothing: --save is checked in the run
    if c.save_interval is not None and c.save_interval <= 0:
        raise ConfigError("--save-interval must be positive")
    if c.save_interval is not None and not c.save and not planning:
        raise ConfigError("--save-interval needs --save DIR to know where to write checkpoints")
    starts = [f"--{name.replace('_', '-')}" for name in ("load", "init_from", "continue_from") if getattr(c, name)]
    if len(starts) > 1:
        raise ConfigError(f"{' and '.join(starts)} exclude each other: --load continues a run (or branches it), "
                          "--init-from takes weights only, --continue-from takes weights and the data position; "
                          "pick one")
    check_save_at(c, cfg.training.train_iters)
    if c.keep_last is not None and c.keep_last < 1:
        raise ConfigError(f"--keep-last must be at least 1 (the checkpoint to resume from), got {c.keep_last}")
    if c.keep_last is not None and not c.save and not planning:
        raise ConfigError("--keep-last needs --save DIR, the folder whose checkpoints it prunes")
    for flag, value in (("--override-data", c.override_data), ("--override-schedule", c.override_schedule)):
        if value and not (c.load or c.save) and not planning:
            raise ConfigError(f"{flag} only matters when resuming: pass --load DIR, or --save DIR of the run "
                              "to continue")
    if c.overwrite_damaged and not c.save and not planning:
        raise ConfigError("--overwrite-damaged concerns the checkpoints of --save DIR; pass the --save folder")


def check_save_at(c: CheckpointConfig, train_iters: int) -> None:
    if not c.save_at:
        return
    if not isinstance(c.save_at, list) or not all(isinstance(s, int) for s in c.save_at):
        raise ConfigError(f"--save-at takes a list of steps (YAML: save_at: [10000, 20000]), got {c.save_at!r}")
    if not c.save:
        raise ConfigError("--save-at needs --save DIR, the folder to write its checkpoints to")
    if any(b <= a for a, b in zip(c.save_at, c.save_at[1:])):
        raise ConfigError(f"--save-at {','.join(map(str, c.save_at))} is not strictly increasing; list each step "
                          "once, in increasing order")
    if c.save_at[0] < 1 or c.save_at[-1] > train_iters:
        bad = c.save_at[0] if c.save_at[0] < 1 else c.save_at[-1]
        raise ConfigError(f"--save-at step {bad} is outside this run's steps 1-{train_iters}; drop it or raise "
                          "--train-iters")


def check_stopping(cfg: Config) -> None:
    t, planning = cfg.training, cfg.parallel.dry_run
    if t.exit_interval is not None and t.exit_interval <= 0:
        raise ConfigError(f"--exit-interval must be positive, got {t.exit_interval}")
    if t.exit_duration_in_mins is not None and t.exit_duration_in_mins <= 0:
        raise ConfigError(f"--exit-duration-in-mins must be positive, got {t.exit_duration_in_mins}")
    if (t.exit_interval is not None or t.exit_duration_in_mins is not None) and not cfg.checkpoint.save \
            and not planning:
        raise ConfigError("--exit-interval / --exit-duration-in-mins stop the run with a checkpoint: pass --save DIR")


def check_sample_mode(cfg: Config, seq_length: int) -> None:
    """A document mode (--sample-mode other than windows) needs rows of at least 2 tokens: a row of one holds one
    token of one document, which no objective can score (nothing to predict it from)."""
    if cfg.data.sample_mode != "windows" and seq_length < 2:
        raise ConfigError(f"--sample-mode {cfg.data.sample_mode} needs --seq-length of at least 2 tokens, got "
                          f"{seq_length}; raise --seq-length (or use --sample-mode windows)")


def check_validation(cfg: Config, values: DerivedValues) -> None:
    d, v = cfg.data, cfg.validation
    if d.split is not None and d.valid_data_path:
        raise ConfigError("--split and --valid-data-path both give a validation set; pass one of them")
    weights = values.split_weights
    if weights is not None and weights[1] == 0:
        raise ConfigError(f"--split {d.split} leaves no validation documents; give the second weight a share "
                          "(e.g. 969,30,1), or drop --split")
    if v.eval_mask_ratio is not None and not 0.0 < v.eval_mask_ratio < 1.0:
        raise ConfigError(f"--eval-mask-ratio must be strictly between 0 and 1, got {v.eval_mask_ratio}")
    for name in ("eval_interval", "eval_iters", "eval_mask_ratio"):
        value = getattr(v, name)
        if value is not None and value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if value is not None and not values.validation:
            raise ConfigError(f"--{name.replace('_', '-')} needs a validation set: pass --split (e.g. 969,30,1) or "
                              "--valid-data-path")


def check_parallel(cfg: Config) -> None:
    p = cfg.parallel
    if p.world_size is not None and p.world_size < 1:
        raise ConfigError(f"--world-size must be positive, got {p.world_size}")
    if not 0 < p.distributed_timeout_minutes <= MAX_TIMEOUT_MINUTES:
        raise ConfigError(f"--distributed-timeout-minutes must be a positive number of minutes, at most "
                          f"{MAX_TIMEOUT_MINUTES:,} (a year: torch holds the timeout in milliseconds), got "
                          f"{p.distributed_timeout_minutes:g}")
    if p.world_size is not None and not p.dry_run:
        raise ConfigError("--world-size only plans a layout with --dry-run; a real run takes its world size from "
                          "the launcher (torchrun, srun or mpirun)")


def check_init_from_checkpoint(m: ModelConfig, saved: dict, tensor_flags: tuple[str, ...], source) -> None:
    """The model flags among ``tensor_flags`` (those that decide which tensors a checkpoint holds) given with a value
    of their own agree with the megamlm --init-from checkpoint ``source``, whose values are ``saved``
    (megamlm/hf/init_from.py: every flag left at its default takes the checkpoint's value)."""
    defaults = type(m)()
    for name in tensor_flags:
        given = getattr(m, name)
        if given != saved[name] and given != getattr(defaults, name):
            raise ConfigError(f"--{name.replace('_', '-')} {given} contradicts the --init-from checkpoint {source}, "
                              f"which has {saved[name]}; drop the flag (the shape comes from the checkpoint)")


def check_adopted_shape(m: ModelConfig, adopted: dict, source) -> None:
    """The shape flags given explicitly agree with the ``adopted`` values (by flag name) of the --init-from model
    ``source`` (megamlm/hf/init_from.py)."""
    for name, value in adopted.items():
        explicit = getattr(m, name)
        if explicit is not None and explicit != value:
            raise ConfigError(f"--{name.replace('_', '-')} {explicit} contradicts the --init-from model, which has "
                              f"{value} ({source}); drop the flag (the shape comes from the model)")


def check_hf_init_from(cfg: Config, source, imported: bool, world_size: int) -> None:
    """A Hugging Face --init-from model ``source`` can be adopted by this launch: the data is tokenized by its
    tokenizer (not the bundled corpus), and a multi-process launch finds it ``imported`` already."""
    if not cfg.data.data_path:
        raise ConfigError(f"--init-from {source}: the bundled corpus is tokenized with megamlm's own tokenizer, not "
                          "this model's; tokenize your data with the model's tokenizer (tools/preprocess_data.py) "
                          "and pass --data-path")
    if not imported and world_size > 1:
        raise ConfigError(f"--init-from {source} is a Hugging Face model that has not been imported yet, and "
                          "importing it in every rank of a multi-process launch would race: run "
                          f"`python tools/convert_from_hf.py --input {source} --output CKPT` once and pass "
                          "--init-from CKPT")


def check_performance(p: PerformanceConfig) -> None:
    """Optional accelerators asked for must be installed (looked up, never imported, here)."""
    if problem := attention_backend_problem(p.attention_backend, None):
        raise ConfigError(problem)
    if p.optimizer_impl == "apex" and not installed("apex"):
        raise ConfigError(missing_message("apex", "--optimizer-impl apex") + ", or use --optimizer-impl torch")
    if p.kernel_backend == "triton" and not installed("triton"):
        raise ConfigError(missing_message("triton", "--kernel-backend triton") + ", or use --kernel-backend auto")
    if p.fp8 and not installed("torchao"):
        raise ConfigError(missing_message("torchao", "--fp8") + ", or drop --fp8")
