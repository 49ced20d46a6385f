"""The check of one setting's value, whichever way it arrives: a run-level flag (config/checks.py) or a recipe
phase's field of the same setting (each phase field names its run setting in config/phase_fields.py). Each answers
the flag's own one-line problem, or None; the caller raises it, naming where the value came from. And the checks of
a recipe's phases as given (``phases:`` items): one line naming the phase (``phase N``, from 1, as the log does),
the field and the fix (the phases against the model and the layout: config/recipe_settings.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import get_args

from megamlm.config.phase_fields import PhaseConfig
from megamlm.config.sections import PHASE_OBJECTIVES, Config, SampleMode, WSDDecayStyle
from megamlm.errors import ConfigError

RANGES: dict[tuple[str, str], tuple] = {
    ("model", "vocab_size"): (1, None, True, True),
    ("model", "make_vocab_size_divisible_by"): (1, None, True, True),
    ("model", "rope_theta"): (0, None, False, True),
    ("model", "local_rope_theta"): (0, None, False, True),
    ("model", "norm_epsilon"): (0, None, False, True),
    ("model", "init_method_std"): (0, None, False, True),
    ("model", "attention_dropout"): (0, 1, True, False),
    ("model", "mlp_dropout"): (0, 1, True, False),
    ("model", "embedding_dropout"): (0, 1, True, False),
    ("model", "initializer_cutoff_factor"): (0, None, False, True),
    ("model", "global_attn_every_n_layers"): (1, None, True, True),
    ("training", "lr"): (0, None, False, True),
    ("training", "min_lr"): (0, None, True, True),
    ("training", "lr_warmup_iters"): (0, None, True, True),
    ("training", "lr_wsd_decay_iters"): (0, None, True, True),
    ("training", "weight_decay"): (0, None, True, True),
    ("training", "adam_beta1"): (0, 1, True, False),
    ("training", "adam_beta2"): (0, 1, True, False),
    ("training", "adam_eps"): (0, None, False, True),
    ("training", "clip_grad"): (0, None, True, True),
    ("training", "seed"): (0, 2**63 - 1, True, True),
    ("objective", "mask_ratio"): (0, 1, False, False),
}
"""Numeric settings with a natural range: (lowest, highest, lowest allowed, highest allowed); None: unbounded."""
POSITIVE = {("model", "seq_length"), ("training", "global_batch_size")}
"""Counts that must be at least 1 (their run-level checks: check_model's shape, check_training's batch sizes)."""
MASK_PROBS = ("mask_replace_prob", "mask_random_prob", "mask_keep_prob")
"""The three probabilities of what a selected token becomes: each >= 0, together 1."""


def flag_of(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def setting_problem(section: str, name: str, value) -> str | None:
    """The run-level flag's one-line problem with ``value`` for setting ``section.name`` (None: fine)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{flag_of(name)} must be a finite number, got {value}"
    if (section, name) in POSITIVE and value <= 0:
        return f"{flag_of(name)} must be positive, got {value}"
    if (section, name) == ("objective", "mask_ratio") and not 0.0 < value < 1.0:  # the words it always had
        return f"--mask-ratio must be strictly between 0 and 1, got {value}"
    if (section, name) not in RANGES:
        return None
    low, high, low_ok, high_ok = RANGES[section, name]
    too_low = low is not None and (value < low if low_ok else value <= low)
    too_high = high is not None and (value > high if high_ok else value >= high)
    if not (too_low or too_high):
        return None
    bounds = " and ".join(part for part in (
        f"{'>=' if low_ok else '>'} {low}" if low is not None else "",
        f"{'<=' if high_ok else '<'} {high}" if high is not None else "") if part)
    return f"{flag_of(name)} must be {bounds}, got {value}"


def masking_problem(probs: tuple[float, float, float]) -> str | None:
    """The flags' problem with (replace, random, keep) probabilities that are negative or do not sum to 1."""
    if any(p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        return f"{'/'.join(map(flag_of, MASK_PROBS))} must be >= 0 and sum to 1, got {probs}"
    return None


def phase_name(index: int) -> str:
    return f"phase {index + 1}"


def check_items(cfg: Config, items: list[PhaseConfig]) -> None:
    """The phases as a list: each on its own, then what they give together."""
    if cfg.training.train_tokens is None and any(item.tokens is not None for item in items):
        raise ConfigError("phases with lengths in tokens need the run's length in tokens too: give --train-tokens "
                          "(or give every phase's length in steps)")
    for index, item in enumerate(items):
        _check_item(index, item, index == len(items) - 1)
    if any(item.fraction is not None for item in items) and \
            any(item.steps is not None or item.tokens is not None for item in items):
        raise ConfigError("the phases give their lengths both as fractions of the run and in steps or tokens; give "
                          "every phase's length one way (fractions place each phase's end from the run's start)")
    first_validated = next((i for i, item in enumerate(items) if item.valid_data_path is not None), None)
    if first_validated and cfg.data.split is None and not cfg.data.valid_data_path:
        raise ConfigError(f"{phase_name(first_validated)} sets valid_data_path, but the phases before it have no "
                          "validation data; give the run --valid-data-path (or --split), or set it in phase 1")
    if cfg.training.global_batch_size is None:
        raise ConfigError("the recipe's phases need the global batch size; it is fitted before phases resolve")


def _check_item(index: int, item: PhaseConfig, last: bool) -> None:
    """What one phase sets, on its own: one line naming the phase, the field and the fix; a value of a run setting
    gets that flag's own check (config/setting_checks.py) whichever way it arrives."""
    where = phase_name(index)
    lengths = [key for key in ("steps", "tokens", "fraction") if getattr(item, key) is not None]
    if len(lengths) > 1:
        raise ConfigError(f"{where} gives both {lengths[0]} and {lengths[1]}; give its length one way")
    if item.fraction is not None and not 0.0 < item.fraction < 1.0:
        raise ConfigError(f"{where}.fraction must be strictly between 0 and 1 (a share of the run), got "
                          f"{item.fraction}")
    for key in ("steps", "tokens"):  # a length; a run setting's value gets its flag's check below
        value = getattr(item, key)
        if value is not None and value < 1:
            raise ConfigError(f"{where}.{key} must be at least 1, got {value}")
    if not lengths and not last:
        raise ConfigError(f"{where} has no length; give it steps, tokens or fraction (only the last phase may leave "
                          "its length out: it runs to the end of the run)")
    if item.objective is not None and item.objective not in PHASE_OBJECTIVES:
        raise ConfigError(f"{where}.objective {item.objective!r} is not one of {', '.join(PHASE_OBJECTIVES)}")
    if item.sample_mode is not None and item.sample_mode not in get_args(SampleMode):
        raise ConfigError(f"{where}.sample_mode {item.sample_mode!r} is not one of {', '.join(get_args(SampleMode))}")
    styles = get_args(WSDDecayStyle)
    if item.lr_wsd_decay_style is not None and item.lr_wsd_decay_style not in styles:
        raise ConfigError(f"{where}.lr_wsd_decay_style {item.lr_wsd_decay_style!r} is not one of {', '.join(styles)}")
    if item.lr_wsd_decay_style is not None and not item.lr_decay:
        raise ConfigError(f"{where} sets lr_wsd_decay_style but is not the decay phase; add lr_decay: true to it")
    problems = {f.name: setting_problem(*f.metadata["run_setting"].split("."), getattr(item, f.name))
                for f in dataclasses.fields(item) if f.metadata["run_setting"] and getattr(item, f.name) is not None}
    if item.lr_warmup_iters is not None and (item.lr_warmup_iters < 1 or index == 0):
        raise ConfigError(f"{where}.lr_warmup_iters {item.lr_warmup_iters}: a re-warmup takes at least 1 step, in a "
                          "phase after the first (--lr-warmup-iters warms up the run's start)"
                          + _also(problems.get("lr_warmup_iters")))
    if item.lr is not None and (not item.lr > 0 or index == 0):
        raise ConfigError(f"{where}.lr {item.lr}: a phase's learning rate is positive, in a phase after the first "
                          "(the first phase's is --lr)" + _also(problems.get("lr")))
    name, problem = next(((name, problem) for name, problem in problems.items() if problem), (None, None))
    if problem:  # the flag's own words, said of the phase's field
        flag = flag_of(item.__dataclass_fields__[name].metadata["run_setting"].split(".")[1])
        raise ConfigError(f"{where}.{name}{problem.removeprefix(flag)} (as {flag})")


def _also(problem: str | None) -> str:
    """The run-level flag's own words about the same value, after a phase's."""
    return f"; {problem}" if problem else ""
