"""What a resolved recipe writes into the run settings that carry it for the whole run, as part of resolving the
config (config/resolve.py): the run's length (from ``--train-tokens`` or phase lengths in tokens), the objective
sequence and its switch steps (the ObjectiveSchedule's stages), a decay phase's length and shape (the WSD decay of
the one LR schedule), and ``--save-at-tokens`` as the steps that reach them; and the check of every phase against
the model and the layout (``check_recipe_against_model``). The recipe itself is resolved once for
this (``apply_recipe``); the run resolves it once more from the completed config (training/resolved_run.py) and
hands it to everything that reads it.
"""

from __future__ import annotations

import dataclasses

from megamlm.config.derived import objective_name, objective_stages, resolved_shape
from megamlm.config.phases import Recipe, recipe_of
from megamlm.config.sections import Config
from megamlm.config.setting_checks import phase_name
from megamlm.errors import ConfigError


def apply_recipe(cfg: Config) -> tuple[Config, Recipe | None]:
    """``cfg`` with its ``phases:`` written into the settings the rest of the run reads, and the recipe it resolved
    (None when it needed none: no phases, no lengths in tokens). A config without ``phases:`` keeps its
    --objective and switches (they are its phases)."""
    recipe = None
    if cfg.recipe.phases:
        recipe = recipe_of(cfg)
        cfg = _with_objectives(_with_length(cfg, recipe), recipe)
    elif cfg.training.train_tokens is not None:
        # The run's length first (one sequence length: the objectives do not change it), then --switch's fractions
        # of it place the switches.
        recipe = _tokens_recipe(cfg)
        cfg = _with_length(cfg, recipe)
    if cfg.checkpoint.save_at_tokens:
        cfg = _with_save_at_tokens(cfg, recipe or _tokens_recipe(cfg))
    return cfg, recipe


def _tokens_recipe(cfg: Config) -> Recipe:
    """The objective-only form's phases as far as lengths and tokens go: its switches never change them, so they
    are left out (they are placed by --switch's fractions of the length this finds)."""
    one = dataclasses.replace(cfg.objective, objective=objective_stages(cfg.objective.objective)[0], switch=None,
                              switch_step=None)
    return recipe_of(dataclasses.replace(cfg, objective=one))


def _with_save_at_tokens(cfg: Config, recipe: Recipe) -> Config:
    """--save-at-tokens N: the first step by which the run has trained N tokens joins --save-at."""
    c, tokens = cfg.checkpoint, recipe.tokens_through_steps
    steps = []
    for wanted in c.save_at_tokens:
        step = next((s for s, done in enumerate(tokens) if s and done >= wanted), None)
        if step is None or wanted < 1:
            raise ConfigError(f"--save-at-tokens {wanted:,} is outside this run's {tokens[-1]:,} tokens; drop it or "
                              "lengthen the run")
        steps.append(step)
    save_at = sorted({*c.save_at, *steps})
    return dataclasses.replace(cfg, checkpoint=dataclasses.replace(c, save_at=save_at))


def _stages(recipe: Recipe) -> tuple[list[str], list[int]]:
    """The objective schedule's stages: consecutive phases of one objective as one stage, and the switch steps
    between them."""
    collapsed: list[str] = []
    switches: list[int] = []
    for phase in recipe.phases:
        if collapsed and collapsed[-1] == phase.objective:
            continue
        if collapsed:
            switches.append(phase.first_step - 1)
        collapsed.append(phase.objective)
    return collapsed, switches


def _with_objectives(cfg: Config, recipe: Recipe) -> Config:
    """The phases' objectives as --objective and its switch steps; a last decaying phase as the WSD decay."""
    collapsed, switches = _stages(recipe)
    given = objective_stages(cfg.objective.objective)
    if len(given) > 1 and tuple(given) != tuple(collapsed):
        raise ConfigError(f"--objective {cfg.objective.objective} and the phases' objectives ({','.join(collapsed)}) "
                          "give the schedule two ways; set each phase's objective in phases: and drop --objective's "
                          "sequence (and --switch)")
    o = dataclasses.replace(cfg.objective, objective=objective_name(tuple(collapsed)), switch=None,
                            switch_step=None if not switches else switches[0] if len(switches) == 1 else switches)
    t = cfg.training
    decay = recipe.phases[-1]
    if decay.lr_decay:
        if t.lr_decay_style != "wsd":
            raise ConfigError(f"{phase_name(decay.index)} sets lr_decay, the WSD decay, but --lr-decay-style is "
                              f"{t.lr_decay_style}; use --lr-decay-style wsd")
        t = dataclasses.replace(t, lr_wsd_decay_iters=decay.steps, lr_wsd_decay_fraction=None,
                                lr_wsd_decay_style=decay.lr_wsd_decay_style or t.lr_wsd_decay_style)
    return dataclasses.replace(cfg, objective=o, training=t)


def _with_length(cfg: Config, recipe: Recipe) -> Config:
    """The run's --train-iters: the phases' last step (from --train-tokens or phase lengths in tokens)."""
    if cfg.training.train_iters == recipe.last_step:
        return cfg
    return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, train_iters=recipe.last_step))


def check_recipe_against_model(cfg: Config, recipe: Recipe, world_size: int = 1) -> None:
    """Every phase's sequence length within the model's positions and split evenly by the layout, and its global
    batch split into micro-batches over the data-parallel ranks of ``world_size`` processes."""
    positions = resolved_shape(cfg.model)["seq_length"]
    p = cfg.parallel
    tp = p.tensor_model_parallel_size
    unit = (cfg.training.micro_batch_size or 1) * max(1, world_size // max(1, tp * p.pipeline_model_parallel_size))
    for phase in recipe.phases:
        where = phase_name(phase.index)
        if phase.global_batch_size is not None and phase.global_batch_size % unit:
            raise ConfigError(f"{where}.global_batch_size {phase.global_batch_size} is not a multiple of "
                              f"--micro-batch-size x data-parallel size = {unit}; pick a multiple of {unit}")
        if phase.seq_length > positions:
            raise ConfigError(f"{where}.seq_length {phase.seq_length} is beyond the model's {positions} positions "
                              f"(--seq-length); raise --seq-length to at least {phase.seq_length}, or shorten the "
                              "phase's")
        if phase.seq_length % tp:
            raise ConfigError(f"{where}.seq_length {phase.seq_length} is not divisible by --tensor-model-parallel-size "
                              f"{tp} (sequence parallelism splits it evenly); pick a multiple of {tp}")
        if phase.sample_mode != "windows" and phase.seq_length < 2:
            raise ConfigError(f"{where}.seq_length {phase.seq_length}: its sample mode {phase.sample_mode} needs rows "
                              "of at least 2 tokens; lengthen the phase's rows")
    streams = {(phase.data_path, phase.seq_length, phase.sample_mode) for phase in recipe.phases}
    if cfg.checkpoint.continue_from and len(streams) > 1:
        raise ConfigError("--continue-from with phases that change the data or the sequence length is not built yet "
                          "(each phase reads its samples by position from the run's step 1); start the recipe with "
                          "--init-from, or give its phases one data, one length and one sample mode")
