"""The one place a Config is completed: fill in what the user left unset, validate once, hand it on frozen.

``parse_args`` = flags (and YAML) -> ``resolve``. Resolving adopts what a caller lends (``adopt``: the shape and
tokenizer of a Hugging Face ``--init-from`` model, megamlm/hf/init_from.py, which this package may not import),
then fits the unset batch sizes to the layout, then runs every check; ``parse_args`` first fills in the paper
presets' recipe where flags are unset (recipes.py). After it nothing changes the Config: its
sections are frozen dataclasses, and the parallel layout is computed from it once (megamlm/parallel/dims.py).
"""

from __future__ import annotations

from typing import Callable

from megamlm.config.batches import fit_batch_sizes
from megamlm.config.checks import validate
from megamlm.config.flags import given_settings
from megamlm.config.loader import config_from_settings
from megamlm.config.model_presets import with_model_preset
from megamlm.config.phase_data import adopt_sidecar_tokenizer
from megamlm.config.recipe_settings import apply_recipe, check_recipe_against_model
from megamlm.config.recipes import recipe_file, with_recipe
from megamlm.config.sections import Config
from megamlm.launcher_env import world_size_from_env
from megamlm.log import log

Adopter = Callable[[Config], Config]
"""Fills values in from the --init-from model (a Hugging Face model's shape); returns a replaced Config. Called
only when --init-from is given."""


def launch_world_size(cfg: Config) -> int:
    """The processes the run is planned for: --world-size (dry runs), else the launcher's."""
    return cfg.parallel.world_size or world_size_from_env()


def resolve(cfg: Config, adopt: Adopter | None = None, world_size: int | None = None) -> Config:
    """``cfg`` completed for this launch and validated; raises ConfigError naming the fix."""
    if adopt is not None and cfg.checkpoint.init_from:
        cfg = adopt(cfg)
    tokenizer_note = None
    if cfg.data.data_path or cfg.recipe.phases:  # the bundled corpus's tokenizer is the default one
        cfg, tokenizer_note = adopt_sidecar_tokenizer(cfg)
    world_size = world_size or launch_world_size(cfg)
    cfg, note = fit_batch_sizes(cfg, world_size)
    recipe = None
    if cfg.recipe.phases or cfg.training.train_tokens is not None or cfg.checkpoint.save_at_tokens:
        cfg, recipe = apply_recipe(cfg)  # the phases' lengths, objectives and decay into the settings that carry them
    validate(cfg)
    if cfg.recipe.phases:
        check_recipe_against_model(cfg, recipe, world_size)
    for line in (tokenizer_note, note):  # after the checks, which can still refuse the launch
        if line:
            log(line)
    return cfg


def given_config(argv: list[str] | None = None) -> tuple[Config, str | None]:
    """Flags (and an optional YAML file) -> the Config as given with the preset's recipe (recipes.py) filled in
    where a flag is unset, not yet validated, and the note naming what the recipe filled (None when nothing)."""
    settings, filled = with_recipe(with_model_preset(given_settings(argv)))
    cfg = config_from_settings(settings)
    if not filled:
        return cfg, None
    preset = cfg.model.model
    return cfg, (f"--model {preset}: {' '.join(filled)} from its recipe ({recipe_file(preset)}); "
                 "flags and --config override them")


def parse_args(argv: list[str] | None = None, adopt: Adopter | None = None) -> Config:
    """Flags (and an optional YAML file) -> the launch's validated, frozen Config."""
    cfg, note = given_config(argv)
    cfg = resolve(cfg, adopt)
    if note:
        log(note)
    return cfg
