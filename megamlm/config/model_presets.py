"""A model preset's features (ModernBERT's block: its norms, head, RoPE bases, window and layer pattern) filled into
the model flags as given, and ``--global-attn-every-n-layers`` turned into ``--layer-types``, before the Config is
built and validated (``resolve.given_config``).

A preset's shape (layers, widths, heads, vocabulary, sequence) is read where a shape flag is unset
(``derived.resolved_shape``); its features are written into the settings here, where the flag is not given or
holds its default (a YAML file holds every default): ``--model modernbert-base --rope-theta 80000`` overrides the
preset's base, ``--norm-type rmsnorm`` (the default) cannot undo its LayerNorm.
"""

from __future__ import annotations

import copy
import dataclasses

from megamlm.config.derived import SHAPE_FIELDS
from megamlm.config.sections import MODEL_FLAG_NAMES, ModelConfig
from megamlm.errors import ConfigError
from megamlm.model.config import PRESETS, global_every_layer_types

EVERY_N = "global_attn_every_n_layers"
DEFAULT_PRESET = "tiny"
"""The preset of a launch that names none (``--model``'s default)."""
FEATURES: dict[str, dict] = {name: {key: value for key, value in preset.items()
                                    if MODEL_FLAG_NAMES.get(key, key) not in SHAPE_FIELDS}
                             for name, preset in PRESETS.items()}
"""Preset -> the model flags it fills in beyond its shape (the shape is read from ``PRESETS`` where it is needed,
config/derived.py): empty for the plain presets (tiny)."""


def _model_default(key: str):
    fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    return fields[key].default if key in fields else dataclasses.MISSING


def with_model_preset(settings: dict, default_preset: str = DEFAULT_PRESET) -> dict:
    """``settings`` ({section: {key: value}} as given) with the model preset's features and the layer pattern of
    ``--global-attn-every-n-layers`` filled in (a copy; ``settings`` itself where there is nothing to fill in: a
    plain preset such as tiny, no layer pattern to expand)."""
    model = dict(settings.get("model") or {})
    preset = PRESETS.get(model.get("model") or default_preset, {})
    features = FEATURES.get(model.get("model") or default_preset, {})
    every = model.get(EVERY_N)
    if not features and every is None:
        return settings
    if every is not None:
        if model.get("layer_types") is not None:
            raise ConfigError(f"--global-attn-every-n-layers {every} and --layer-types give the layer pattern two "
                              "ways; pass one of them")
        if not isinstance(every, int) or every < 1:
            raise ConfigError(f"--global-attn-every-n-layers must be a whole number of at least 1, got {every!r}")
        layers = model.get("num_layers") or preset.get("num_layers")
        model["layer_types"] = global_every_layer_types(layers, every)
    for key, value in features.items():
        if model.get(key, _model_default(key)) != _model_default(key):
            continue
        if key == "layer_types" and model.get("num_layers") not in (None, preset["num_layers"]):
            value = global_every_layer_types(model["num_layers"], _period(value))  # the preset's pattern, resized
        model[key] = value
    out = copy.deepcopy(settings)
    out["model"] = model
    return out


def _period(layer_types: str) -> int:
    """N of a pattern with a full layer every N (the distance between its first two full layers)."""
    full = [i for i, kind in enumerate(layer_types.split(",")) if kind == "full"]
    return full[1] - full[0] if len(full) > 1 else len(layer_types.split(","))
