"""Values computed from the settings (the switch step, warmup and decay lengths, split weights, the model shape):
each computed here once and read by the checks, the trainer, the dry run and the planner alike."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from megamlm.config.sections import (
    MODEL_FLAG_NAMES,
    OBJECTIVE_STAGES,
    Config,
    DataConfig,
    ModelConfig,
    ObjectiveConfig,
    TrainingConfig,
)
from megamlm.errors import ConfigError
from megamlm.model.config import PRESETS, ModelArgs, global_every_layer_types, pad_vocab_size
from megamlm.model.rope_scaling import RopeScaling

DEFAULT_SWITCH = 0.25
DEFAULT_EVAL_INTERVAL, DEFAULT_EVAL_ITERS = 1000, 10

SHAPE_FIELDS = tuple(MODEL_FLAG_NAMES.get(f.name, f.name) for f in dataclasses.fields(ModelArgs)
                     if f.default is dataclasses.MISSING)
"""The model flags that take the preset's value until set (ModelArgs' fields without a default)."""
_FIRST_FEATURE = [f.name for f in dataclasses.fields(ModelArgs)].index("init_method_std") + 1
FEATURE_FIELDS = tuple(f.name for f in dataclasses.fields(ModelArgs)[_FIRST_FEATURE:])
"""ModelArgs' features of imported decoders (the fields after init_method_std), each off by default."""


def objective_stages(objective: str) -> tuple[str, ...]:
    """The stages a --objective trains in order (the ObjectiveSchedule's; a recipe's phases are config/phases.py's):
    a named objective's, else the comma-separated objectives as given
    (checked by ``check_objective``)."""
    if objective in OBJECTIVE_STAGES:
        return OBJECTIVE_STAGES[objective]
    return tuple(part.strip() for part in str(objective).split(","))


def objective_name(stages: tuple[str, ...]) -> str:
    """The one name of a sequence of stages: the named objective that trains it (``clm,mlm`` is ``clm_then_mlm``),
    else the stages joined by commas; schedules are stored under it, so that both spellings resume each other."""
    named = [name for name, named_stages in OBJECTIVE_STAGES.items() if named_stages == tuple(stages)]
    return named[0] if named else ",".join(stages)


def as_tuple(value) -> tuple:
    """A setting given as one value or a list (--switch, --switch-step, a stored switch step) as a tuple."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def fraction_step(fraction: float, train_iters: int) -> int:
    """The step that ``fraction`` of a ``train_iters``-step run ends at: round(fraction x iters) (--switch, the LR
    fractions, a study's CLM fractions)."""
    return round(fraction * train_iters)


def switch_steps(o: ObjectiveConfig, train_iters: int) -> tuple[int, ...]:
    """The last step of every stage but the last (none for one objective): --switch-step, else round(--switch x
    iters) of each fraction; a two-stage schedule without either switches at 0.25. The one place switch steps are
    computed (``check_objective`` checks one per boundary, increasing, inside the run)."""
    if len(objective_stages(o.objective)) == 1:
        return ()
    if o.switch_step is not None:
        return as_tuple(o.switch_step)
    if o.switch is None:
        return (fraction_step(DEFAULT_SWITCH, train_iters),) if len(objective_stages(o.objective)) == 2 else ()
    return tuple(fraction_step(fraction, train_iters) for fraction in as_tuple(o.switch))


def switch_step(o: ObjectiveConfig, train_iters: int) -> int | None:
    """The first switch step (the switch of a two-stage schedule); None for one objective."""
    steps = switch_steps(o, train_iters)
    return steps[0] if steps else None


@dataclass(frozen=True)
class Switches:
    """An objective schedule's stages and its switches, as given and as steps, for a run of ``train_iters`` steps:
    what ``check_switches`` decides on (a run's from its config, a study arm's from its schedule)."""

    stages: tuple[str, ...]
    fractions: tuple[float, ...]
    """--switch's fractions as given."""
    given_steps: tuple[int, ...]
    """--switch-step's steps as given."""
    steps: tuple[int, ...]
    """The switch steps the run takes (``switch_steps``)."""
    train_iters: int

    @classmethod
    def of(cls, o: ObjectiveConfig, train_iters: int) -> Switches:
        return cls(objective_stages(o.objective), as_tuple(o.switch), as_tuple(o.switch_step),
                   switch_steps(o, train_iters), train_iters)


def _steps(iters: int | None, fraction: float | None, train_iters: int) -> int:
    if iters is not None:
        return iters
    return fraction_step(fraction if fraction is not None else 0.05, train_iters)


def warmup_iters(t: TrainingConfig) -> int:
    """--lr-warmup-iters, else round(--lr-warmup-fraction x iters), else 5% of --train-iters."""
    return _steps(t.lr_warmup_iters, t.lr_warmup_fraction, t.train_iters)


def wsd_decay_iters(t: TrainingConfig) -> int:
    """--lr-wsd-decay-iters, else round(--lr-wsd-decay-fraction x iters), else 5% of the run: at least one step, so
    that a short WSD run decays too, but never the only step."""
    if t.lr_wsd_decay_iters is not None or t.lr_wsd_decay_fraction is not None:
        return _steps(t.lr_wsd_decay_iters, t.lr_wsd_decay_fraction, t.train_iters)
    return min(max(1, fraction_step(0.05, t.train_iters)), t.train_iters - 1)


def unused_lr_settings(t: TrainingConfig) -> str | None:
    """A WSD decay length given with another --lr-decay-style sets nothing; the start-up line says so. (Not an
    error: a config file's WSD length under a command line's --lr-decay-style cosine is a normal layering.)"""
    if t.lr_decay_style == "wsd":
        return None
    given = [flag for flag, value in (("--lr-wsd-decay-iters", t.lr_wsd_decay_iters),
                                      ("--lr-wsd-decay-fraction", t.lr_wsd_decay_fraction)) if value is not None]
    if not given:
        return None
    return (f"{' and '.join(given)} unused: {'they set' if len(given) > 1 else 'it sets'} the decay of "
            f"--lr-decay-style wsd, and this run's style is {t.lr_decay_style}")


def split_weights(d: DataConfig) -> tuple[float, float, float] | None:
    """--split as normalised (train, validation, test) weights, Megatron's way: up to three numbers separated by
    commas or slashes, missing ones 0 ("99,1" is 0.99, 0.01, 0)."""
    if d.split is None:
        return None
    parts = [p.strip() for p in d.split.replace("/", ",").split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(not v >= 0 for v in values) or sum(values) <= 0:
        raise ConfigError(f"--split {d.split} does not parse: give up to three non-negative weights for training, "
                          "validation and test, e.g. 969,30,1")
    values += [0.0] * (3 - len(values))
    total = sum(values)
    return values[0] / total, values[1] / total, values[2] / total


def validation_enabled(cfg: Config) -> bool:
    return cfg.data.split is not None or bool(cfg.data.valid_data_path) or \
        any(phase.valid_data_path for phase in cfg.recipe.phases)


def eval_interval(cfg: Config) -> int:
    v = cfg.validation.eval_interval
    return v if v is not None else DEFAULT_EVAL_INTERVAL


def eval_iters(cfg: Config) -> int:
    v = cfg.validation.eval_iters
    return v if v is not None else DEFAULT_EVAL_ITERS


def resolved_shape(m: ModelConfig) -> dict:
    """The preset's shape with the explicit flags applied, by flag name (vocab_size may stay None: tokenizer-sized)."""
    preset = {MODEL_FLAG_NAMES.get(name, name): value for name, value in PRESETS[m.model].items()}
    return {name: getattr(m, name) if getattr(m, name) is not None else preset[name] for name in SHAPE_FIELDS}


def model_features(m: ModelConfig) -> dict:
    """The ModelArgs features set by flags (head width, attention biases, RoPE scaling, tied embeddings, ...).

    ``--rope-scaling`` is JSON on the command line, a mapping in YAML; a bad one raises ValueError.
    """
    scaling = json.loads(m.rope_scaling) if isinstance(m.rope_scaling, str) else m.rope_scaling
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError("expected a JSON object such as {\"rope_type\": \"linear\", \"factor\": 2}")
    features = {name: getattr(m, name) for name in FEATURE_FIELDS}
    features["rope_scaling"] = RopeScaling.from_dict(scaling) if scaling else None
    return features


def model_args_values(m: ModelConfig) -> dict:
    """Every ModelArgs keyword from the model section (``vocab_size`` None where the tokenizer sizes it)."""
    shape = resolved_shape(m)
    values = {}
    for f in dataclasses.fields(ModelArgs):
        flag = MODEL_FLAG_NAMES.get(f.name, f.name)
        values[f.name] = shape[flag] if flag in shape else getattr(m, flag)
    features = model_features(m)
    if features["layer_types"] is None and m.global_attn_every_n_layers:  # a config built without the flag parser
        features["layer_types"] = global_every_layer_types(values["num_layers"], m.global_attn_every_n_layers)
    return {**values, **features}


def model_section_values(args: ModelArgs) -> dict:
    """The model flags that build ``args`` (the inverse of ``model_args_values``; RoPE scaling as JSON)."""
    values = {MODEL_FLAG_NAMES.get(f.name, f.name): getattr(args, f.name) for f in dataclasses.fields(ModelArgs)}
    values["rope_scaling"] = json.dumps(args.rope_scaling.to_dict()) if args.rope_scaling is not None else None
    return values


def model_args_for(cfg: Config, tokenizer_vocab_size: int) -> ModelArgs:
    """The run's ModelArgs: the model section, with a tokenizer-sized vocabulary padded Megatron's way (to a multiple
    of --make-vocab-size-divisible-by x TP, so that each tensor-parallel rank gets an equal slice)."""
    values = model_args_values(cfg.model)
    multiple = cfg.model.make_vocab_size_divisible_by * cfg.parallel.tensor_model_parallel_size
    vocab = values["vocab_size"] or pad_vocab_size(tokenizer_vocab_size, multiple)
    if tokenizer_vocab_size > vocab:
        raise ConfigError(f"the tokenizer has {tokenizer_vocab_size} ids but the model vocabulary is {vocab}; "
                          f"pass the tokenizer the model was made for (--tokenizer-model, with data tokenized by it), "
                          f"or grow the model with --vocab-size {pad_vocab_size(tokenizer_vocab_size, 128)}")
    return ModelArgs(**{**values, "vocab_size": vocab})


@dataclass(frozen=True)
class DerivedValues:
    """The values computed from a Config that its checks (config/checks.py) decide on, computed together before
    they run (on settings whose numbers and choices are checked): each check is handed what it reads."""

    shape: dict
    """``resolved_shape``: the preset's shape with the explicit flags applied."""
    switches: Switches
    warmup_iters: int
    wsd_decay_iters: int
    split_weights: tuple[float, float, float] | None
    validation: bool
    """Whether the run has a validation set (``validation_enabled``)."""

    @classmethod
    def of(cls, cfg: Config) -> DerivedValues:
        """The values of ``cfg``; raises ConfigError for a --rope-scaling or --split that does not parse."""
        try:
            model_features(cfg.model)
        except ValueError as err:  # json.JSONDecodeError is a ValueError too
            raise ConfigError(f"--rope-scaling {cfg.model.rope_scaling!r}: {err}") from None
        t = cfg.training
        return cls(resolved_shape(cfg.model), Switches.of(cfg.objective, t.train_iters), warmup_iters(t),
                   wsd_decay_iters(t), split_weights(cfg.data), validation_enabled(cfg))
