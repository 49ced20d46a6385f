"""The paper presets' training recipes, declared once: a preset's defaults for the flags a launch leaves unset.

``--model 610m`` alone trains with the recipe of ``examples/configs/paper_610m_clm_then_mlm.yaml`` (learning
rate, warmup and decay, batch sizes, train steps; the sequence length is the preset's shape, 2,048, in
megamlm/model/config.py's PRESETS; tests/unit/test_recipes.py checks both against those files); flags and
``--config`` override each value, and a run given its own ``--train-iters`` keeps warmup and decay lengths that
scale with it (``FOLLOW_TRAIN_ITERS``). The objective schedule is not a preset's: it is the run's choice (the files'
``objective`` section is their example run's). The two batch sizes are the starting point of the batch fit
(``batches.py``), which may shrink the micro-batch to the layout; the rest is filled in by ``with_recipe`` on the
settings as given, before the Config is built (``resolve.parse_args``).
"""

from __future__ import annotations

import copy
import dataclasses

from megamlm.config.model_presets import DEFAULT_PRESET
from megamlm.config.sections import SECTION_CLASSES

PAPER_RECIPE: dict[str, dict] = {
    "training": {"train_iters": 42000, "global_batch_size": 1152, "micro_batch_size": 12, "lr": 5.0e-4,
                 "min_lr": 0.0, "lr_decay_style": "wsd", "lr_warmup_iters": 2000, "lr_wsd_decay_iters": 2000,
                 "weight_decay": 0.1, "clip_grad": 1.0},
}
"""The paper's recipe (arXiv 2507.00994) as megamlm runs it: 42k steps of 1,152 x 2,048 tokens, WSD with 2k
warmup and 2k decay steps; the peak LR is this project's choice."""
RECIPES: dict[str, dict[str, dict]] = {"210m": PAPER_RECIPE, "610m": PAPER_RECIPE, "1b": PAPER_RECIPE}
"""Preset -> {section: {key: value}}; presets not listed (tiny) keep the sections' own defaults."""
BATCH_KEYS = ("micro_batch_size", "global_batch_size")
"""Recipe keys the batch fit starts from instead of setting them (so a layout they do not fit still runs)."""
FOLLOW_TRAIN_ITERS = ("lr_warmup_iters", "lr_wsd_decay_iters")
"""Recipe step counts that belong to the recipe's --train-iters: a run given its own --train-iters keeps the
defaults that scale with it (warmup 5%, as the recipe's 2,000 of 42,000), so `--model 610m --train-iters 100`
still runs."""
_ALTERNATIVE = {("training", "lr_warmup_iters"): "lr_warmup_fraction",
                ("training", "lr_wsd_decay_iters"): "lr_wsd_decay_fraction"}
"""A recipe key that is not filled in when its alternative is given."""


def recipe_file(preset: str) -> str:
    """The example config that writes the recipe of ``preset`` out."""
    return f"examples/configs/paper_{preset}_clm_then_mlm.yaml"


def recipe_batch(preset: str) -> tuple[int, int] | None:
    """(micro, global) of ``preset``'s recipe, None for a preset without one."""
    recipe = RECIPES.get(preset)
    return None if recipe is None else (recipe["training"]["micro_batch_size"], recipe["training"]["global_batch_size"])


def _section_default(section: str, key: str):
    cls = SECTION_CLASSES.get(section)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
    return fields[key].default if key in fields else dataclasses.MISSING


def _recipe_defaults() -> dict[tuple[str, str], dict[str, object]]:
    by_setting: dict[tuple[str, str], dict[str, object]] = {}
    for preset, recipe in RECIPES.items():
        for section, values in recipe.items():
            for key, value in values.items():
                if value != _section_default(section, key):
                    by_setting.setdefault((section, key), {})[preset] = value
    return by_setting


RECIPE_DEFAULTS = _recipe_defaults()
"""(section, key) -> {preset: value} of the recipes that set it to something other than the section's default
(for --help)."""


def with_recipe(settings: dict, default_preset: str = DEFAULT_PRESET) -> tuple[dict, list[str]]:
    """``settings`` ({section: {key: value}} as given by flags and --config) with the preset's recipe filled in
    where a key (or its alternative) is not given, and the flags it filled (``--lr 0.0005``); a copy."""
    preset = (settings.get("model") or {}).get("model") or default_preset
    recipe = RECIPES.get(preset)
    if recipe is None:
        return settings, []
    out, filled = copy.deepcopy(settings), []
    own_length = "train_iters" in (settings.get("training") or {})
    for section, values in recipe.items():
        given = out.get(section) or {}
        for key, value in values.items():
            if (key in BATCH_KEYS or key in given or _ALTERNATIVE.get((section, key)) in given
                    or value == _section_default(section, key)
                    or (key in FOLLOW_TRAIN_ITERS and own_length)):
                continue
            given[key] = value
            filled.append(f"--{key.replace('_', '-')} {value:g}" if isinstance(value, float) else
                          f"--{key.replace('_', '-')} {value}")
        out[section] = given
    return out, filled
