"""A recipe in phases: the ``phases:`` list (or the objective-only ``--objective a,b --switch ...``) resolved into
phases with their settings, step ranges, sample ranges and token counts. The one representation every reader asks
(``recipe_of``): the trainer, the data streams, the run record, the resume check.

A phase sets what it names (``config/phase_fields.py``: length, objective, data, sequence length, RoPE base, mask
ratio and split, the WSD decay) and inherits the rest from the phase before; the first inherits the run's flags.
Phase p trains steps ``first_step..last_step`` and consumes the stream's samples ``first_sample..end_sample - 1``
(the steps' global batches, ``config/rampup.py``), tokens = samples x its sequence length. Lengths in tokens end a
phase at the first step by which it has trained that many. Lengths must add up to the run (``--train-iters``, or
``--train-tokens``); the last phase may leave its length out and runs to the end.

``apply_recipe`` writes what the rest of the config already knows back into it, so that nothing reads phases in
two places: the objective sequence and its switch steps (``--objective``/``--switch-step``, what the
ObjectiveSchedule, the history and the planners read), a decay phase's length and shape (the WSD decay of the one
LR schedule) and the run's length from tokens.
"""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass
from typing import get_args

from megamlm.config.derived import fraction_step, objective_name, objective_phases, resolved_shape, switch_steps
from megamlm.config.phase_fields import PhaseConfig
from megamlm.config.rampup import BatchSizes
from megamlm.config.sections import PHASE_OBJECTIVES, Config, WSDDecayStyle
from megamlm.errors import ConfigError

_INHERITED = ("objective", "data_path", "valid_data_path", "seq_length", "mask_ratio", "mask_replace_prob",
              "mask_random_prob", "mask_keep_prob", "global_batch_size")
_ROPE = ("rope_theta", "local_rope_theta")
"""The settings a phase inherits from the phase before (the first from the run's flags)."""


@dataclass(frozen=True)
class Phase:
    """One resolved phase: every setting it trains with, and where it sits in the run."""

    index: int
    """0-based place in the recipe."""
    first_step: int
    last_step: int
    first_sample: int
    end_sample: int
    """The samples of the stream it consumes: [first_sample, end_sample)."""
    objective: str
    data_path: tuple[str, ...]
    """() for the bundled corpus (the run's default data)."""
    seq_length: int
    rope_bases: tuple
    """(RoPE base, the sliding-window layers' base or None): --rope-theta and --local-rope-theta of the phase."""
    mask_ratio: float
    mask_replace_prob: float
    mask_random_prob: float
    mask_keep_prob: float
    lr_decay: bool = False
    lr_wsd_decay_style: str | None = None
    lr_warmup_iters: int | None = None
    """A re-warmup over the phase's first steps (None: none)."""
    lr: float | None = None
    """The phase's learning rate: the level it holds or decays from (None: the run's one WSD schedule, when no
    phase sets a learning rate of its own and only the last decays)."""
    lr_end: float | None = None
    """Where a decaying phase's learning rate ends: the next phase's ``lr``, or --min-lr for the last."""
    valid_data_path: tuple[str, ...] = ()
    """The phase's validation data; () for the run's (--valid-data-path, or the --split documents)."""
    global_batch_size: int | None = None
    """The phase's samples per step; None: the run's (--global-batch-size, or its --rampup-batch-size)."""

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step + 1

    @property
    def tokens(self) -> int:
        return (self.end_sample - self.first_sample) * self.seq_length

    def stream_key(self) -> tuple:
        """What decides the phase's sample stream besides its position: consecutive phases with the same key read
        one stream (an objective switch never changes the data)."""
        return self.data_path, self.seq_length

    def describe(self) -> str:
        data = " ".join(self.data_path) if self.data_path else "the bundled corpus"
        base, local = self.rope_bases
        rope = f", RoPE base {base:g}" + (f" (local {local:g})" if local is not None else "")
        mask = f", mask {self.mask_ratio:g}" if self.objective != "clm" else ""
        shape = f" ({self.lr_wsd_decay_style})" if self.lr_wsd_decay_style else ""
        decay = f", the WSD decay{shape}" if self.lr_decay else ""
        if self.lr is not None:  # the phases shape the schedule piece by piece
            decay = f", LR {self.lr:g}" + (f" decaying to {self.lr_end:g}{shape}" if self.lr_decay else "")
        decay += f", LR re-warmed up over {self.lr_warmup_iters} steps" if self.lr_warmup_iters else ""
        decay += f", validated on {' '.join(self.valid_data_path)}" if self.valid_data_path else ""
        return (f"phase {self.index + 1}: steps {self.first_step}-{self.last_step}, {self.objective}, seq "
                f"{self.seq_length}{rope}{mask}, data {data}{decay}; samples {self.first_sample}-{self.end_sample - 1}"
                f", {self.tokens:,} tokens")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "data_path": list(self.data_path),
                "valid_data_path": list(self.valid_data_path), "tokens": self.tokens}


@dataclass(frozen=True)
class Recipe:
    """The resolved phases of a run, in order (one phase for a run without any), and the samples consumed through
    each step (``samples_through[k]``: after step k; index 0 is 0)."""

    phases: tuple[Phase, ...]
    samples_through: tuple[int, ...] = dataclasses.field(repr=False, compare=False, default=(0,))
    tokens_through_steps: tuple[int, ...] = dataclasses.field(repr=False, compare=False, default=(0,))

    @property
    def last_step(self) -> int:
        return self.phases[-1].last_step

    @property
    def end_sample(self) -> int:
        return self.phases[-1].end_sample

    def phase_at(self, step: int) -> Phase:
        """The phase that trains 1-based ``step`` (the last phase past the end)."""
        for phase in self.phases:
            if step <= phase.last_step:
                return phase
        return self.phases[-1]

    @property
    def boundaries(self) -> tuple[int, ...]:
        """The last step of every phase but the last: a checkpoint and a validation follow each."""
        return tuple(p.last_step for p in self.phases[:-1])

    def is_boundary(self, step: int) -> bool:
        return step in self.boundaries

    def batch_size_at(self, step: int) -> int:
        """The global batch of 1-based ``step``."""
        return self.samples_through[step] - self.samples_through[step - 1]

    def step_sizes(self) -> array:
        """The global batch of steps 1 to the last (at index ``step - 1``): the run's ramp-up or global batch, or a
        phase's own; what the sampler and the step counter read."""
        return array("q", (b - a for a, b in zip(self.samples_through, self.samples_through[1:])))

    def tokens_through(self, step: int) -> int:
        """Tokens the run has trained once ``step`` is done (0 before step 1)."""
        return self.tokens_through_steps[min(max(step, 0), len(self.tokens_through_steps) - 1)]

    def to_list(self) -> list[dict]:
        """The phases as stored in the run record and every checkpoint's record (``recipe``)."""
        return [p.to_dict() for p in self.phases]

    def describe(self) -> list[str]:
        return [p.describe() for p in self.phases]


def phase_items(cfg: Config) -> list[PhaseConfig]:
    """The phases as given: the ``phases:`` list, else the objective-only form of --objective and its switches."""
    if cfg.recipe.phases:
        return list(cfg.recipe.phases)
    objectives = objective_phases(cfg.objective.objective)
    ends = (*switch_steps(cfg.objective, cfg.training.train_iters), cfg.training.train_iters)
    starts = (0, *ends[:-1])
    # The last phase runs to the end of the run (--train-iters, or --train-tokens' step).
    return [PhaseConfig(steps=end - start if end != ends[-1] else None, objective=objective)
            for objective, start, end in zip(objectives, starts, ends)]


def _name(index: int) -> str:
    return f"phase {index + 1}"


def _check_item(index: int, item: PhaseConfig, last: bool) -> None:
    """What one phase sets, on its own: one line naming the phase, the field and the fix."""
    where = _name(index)
    lengths = [key for key in ("steps", "tokens", "fraction") if getattr(item, key) is not None]
    if len(lengths) > 1:
        raise ConfigError(f"{where} gives both {lengths[0]} and {lengths[1]}; give its length one way")
    if item.fraction is not None and not 0.0 < item.fraction < 1.0:
        raise ConfigError(f"{where}.fraction must be strictly between 0 and 1 (a share of the run), got "
                          f"{item.fraction}")
    for key in ("steps", "tokens", "seq_length", "global_batch_size"):
        value = getattr(item, key)
        if value is not None and value < 1:
            raise ConfigError(f"{where}.{key} must be at least 1, got {value}")
    if not lengths and not last:
        raise ConfigError(f"{where} has no length; give it steps, tokens or fraction (only the last phase may leave "
                          "its length out: it runs to the end of the run)")
    if item.objective is not None and item.objective not in PHASE_OBJECTIVES:
        raise ConfigError(f"{where}.objective {item.objective!r} is not one of {', '.join(PHASE_OBJECTIVES)}")
    for key in _ROPE:
        value = getattr(item, key)
        if value is not None and not value > 0:
            raise ConfigError(f"{where}.{key} must be positive, got {value}")
    if item.mask_ratio is not None and not 0.0 < item.mask_ratio < 1.0:
        raise ConfigError(f"{where}.mask_ratio must be strictly between 0 and 1, got {item.mask_ratio}")
    styles = get_args(WSDDecayStyle)
    if item.lr_wsd_decay_style is not None and item.lr_wsd_decay_style not in styles:
        raise ConfigError(f"{where}.lr_wsd_decay_style {item.lr_wsd_decay_style!r} is not one of {', '.join(styles)}")
    if item.lr_wsd_decay_style is not None and not item.lr_decay:
        raise ConfigError(f"{where} sets lr_wsd_decay_style but is not the decay phase; add lr_decay: true to it")
    if item.lr_warmup_iters is not None and (item.lr_warmup_iters < 1 or index == 0):
        raise ConfigError(f"{where}.lr_warmup_iters {item.lr_warmup_iters}: a re-warmup takes at least 1 step, in a "
                          "phase after the first (--lr-warmup-iters warms up the run's start)")
    if item.lr is not None and (not item.lr > 0 or index == 0):
        raise ConfigError(f"{where}.lr {item.lr}: a phase's learning rate is positive, in a phase after the first "
                          "(the first phase's is --lr)")


def _base(cfg: Config) -> dict:
    """What the first phase inherits: the run's flags."""
    o, m = cfg.objective, cfg.model
    return {"objective": objective_phases(o.objective)[0], "data_path": tuple(cfg.data.data_path),
            "valid_data_path": tuple(cfg.data.valid_data_path),
            "seq_length": resolved_shape(m)["seq_length"], "rope_bases": (m.rope_theta, m.local_rope_theta),
            "mask_ratio": o.mask_ratio, "global_batch_size": None,
            "mask_replace_prob": o.mask_replace_prob, "mask_random_prob": o.mask_random_prob,
            "mask_keep_prob": o.mask_keep_prob}


class _Walk:
    """Steps and samples consumed so far, step by step (a ramp-up's batch depends on the samples consumed)."""

    def __init__(self, sizes: BatchSizes):
        self.sizes = sizes
        self.samples = [0]
        self.tokens = [0]

    @property
    def step(self) -> int:
        return len(self.samples) - 1

    def take(self, seq_length: int, global_batch_size: int | None = None) -> int:
        """One step at ``seq_length`` (of ``global_batch_size`` samples, else the run's); the tokens it trained."""
        size = global_batch_size or self.sizes.size_after(self.samples[-1])
        self.samples.append(self.samples[-1] + size)
        self.tokens.append(self.tokens[-1] + size * seq_length)
        return size * seq_length


def recipe_of(cfg: Config) -> Recipe:
    """The run's phases, resolved (``cfg`` with its batch sizes fitted: ``resolve.py`` calls this after fitting
    them); raises ConfigError naming the phase, the field and the fix."""
    items = phase_items(cfg)
    t = cfg.training
    if t.train_tokens is None and any(item.tokens is not None for item in items):
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
        raise ConfigError(f"{_name(first_validated)} sets valid_data_path, but the phases before it have no "
                          "validation data; give the run --valid-data-path (or --split), or set it in phase 1")
    if t.global_batch_size is None:
        raise ConfigError("the recipe's phases need the global batch size; it is fitted before phases resolve")
    walk = _Walk(BatchSizes.of(t))
    settings = _base(cfg)
    phases, shares = [], 0.0
    for index, item in enumerate(items):
        given = {key: getattr(item, key) for key in _INHERITED if getattr(item, key) is not None}
        for key in ("data_path", "valid_data_path"):
            if key in given:
                given[key] = tuple(given[key])
        if any(getattr(item, key) is not None for key in _ROPE):
            given["rope_bases"] = tuple(getattr(item, key) if getattr(item, key) is not None else inherited
                                        for key, inherited in zip(_ROPE, settings["rope_bases"]))
        settings = {**settings, **given}
        first_step, first_sample = walk.step + 1, walk.samples[-1]
        if item.steps is not None:
            for _ in range(item.steps):
                walk.take(settings["seq_length"], settings["global_batch_size"])
        elif item.tokens is not None:
            done = 0
            while done < item.tokens:
                done += walk.take(settings["seq_length"], settings["global_batch_size"])
        elif item.fraction is not None:  # the shares so far place the phase's end, as --switch's fractions do
            shares += item.fraction
            if t.train_tokens is not None:
                while walk.tokens[-1] < round(shares * t.train_tokens):
                    walk.take(settings["seq_length"], settings["global_batch_size"])
            else:
                while walk.step < fraction_step(shares, t.train_iters):
                    walk.take(settings["seq_length"], settings["global_batch_size"])
        elif t.train_tokens is not None:
            while walk.tokens[-1] < t.train_tokens:
                walk.take(settings["seq_length"], settings["global_batch_size"])
        else:
            while walk.step < t.train_iters:
                walk.take(settings["seq_length"], settings["global_batch_size"])
        if walk.step < first_step:
            raise ConfigError(f"{_name(index)} starts after the run's end (step {walk.step}); the phases before it "
                              "fill the run: shorten them, or lengthen the run")
        phases.append(Phase(index=index, first_step=first_step, last_step=walk.step, first_sample=first_sample,
                            end_sample=walk.samples[-1], lr_decay=bool(item.lr_decay),
                            lr_wsd_decay_style=item.lr_wsd_decay_style, lr_warmup_iters=item.lr_warmup_iters,
                            **settings))
        if item.lr_warmup_iters is not None and item.lr_warmup_iters > phases[-1].steps:
            raise ConfigError(f"{_name(index)}.lr_warmup_iters {item.lr_warmup_iters} is longer than the phase's "
                              f"{phases[-1].steps} steps; shorten the re-warmup")
    recipe = Recipe(_with_learning_rates(cfg, items, phases), tuple(walk.samples), tuple(walk.tokens))
    _check_run_length(cfg, recipe)
    return recipe


def _sets_learning_rates(items: list[PhaseConfig]) -> bool:
    """Whether the phases shape the LR schedule piece by piece: a phase sets its own learning rate, or a phase
    before the last decays (otherwise the run's one WSD schedule, its decay the last phase's, is the schedule)."""
    return any(item.lr is not None for item in items) or any(item.lr_decay for item in items[:-1])


def _with_learning_rates(cfg: Config, items: list[PhaseConfig], phases: list[Phase]) -> tuple[Phase, ...]:
    """Each phase's learning rate (the level it holds or decays from) and a decaying phase's end, where the phases
    shape the schedule (``_sets_learning_rates``); the phases as they are otherwise."""
    if not _sets_learning_rates(items):
        return tuple(phases)
    t = cfg.training
    if t.lr_decay_style != "wsd":
        raise ConfigError(f"the phases set their learning rates (lr, or lr_decay before the last phase), which shape "
                          f"a WSD schedule piece by piece, but --lr-decay-style is {t.lr_decay_style}; use "
                          "--lr-decay-style wsd")
    shaped, level = [], t.lr
    for index, (item, phase) in enumerate(zip(items, phases)):
        level = item.lr if item.lr is not None else level
        end = None
        if item.lr_decay and index + 1 < len(items):
            end = items[index + 1].lr
            if end is None:
                raise ConfigError(f"{_name(index)} decays before the last phase: give {_name(index + 1)} the lr it "
                                  f"decays to (e.g. lr: {level / 2:g})")
        elif item.lr_decay:
            end = t.min_lr
        shaped.append(dataclasses.replace(phase, lr=level, lr_end=end))
        level = level if end is None else end
    return tuple(shaped)


def _check_run_length(cfg: Config, recipe: Recipe) -> None:
    """Phase lengths add up to the run: --train-tokens' steps, else --train-iters."""
    t, last = cfg.training, recipe.last_step
    if t.train_tokens is not None:
        tokens = recipe.tokens_through_steps
        needed = next((step for step, done in enumerate(tokens) if done >= t.train_tokens), None)
        if needed != last:
            got = f"{tokens[-1]:,} tokens in {last} steps"
            raise ConfigError(f"the phases' lengths add up to {got}, but --train-tokens {t.train_tokens:,} ends the "
                              f"run {'later' if needed is None else f'at step {needed}'}; make the phases add up to "
                              "the run (or leave the last phase's length out)")
        return
    if last != t.train_iters:
        raise ConfigError(f"the phases' lengths add up to {last} steps, but the run is {t.train_iters} steps "
                          f"(--train-iters); set --train-iters {last}, or change the phases (or leave the last "
                          "phase's length out: it runs to the end)")


def learning_rate_pieces_of(cfg: Config) -> tuple[tuple, tuple]:
    """What the phases add to the one LR schedule (training/lineage.py builds it), the recipe resolved once and only
    where a phase shapes the rate: (first step, steps) of every re-warmup, and (first step, last step, learning
    rate, end or None, decay shape or None) of every phase where the phases set their rates
    (``_sets_learning_rates``)."""
    items = list(cfg.recipe.phases)
    rewarmed, shaped = any(item.lr_warmup_iters for item in items), _sets_learning_rates(items)
    if not (rewarmed or shaped):
        return (), ()
    phases, style = recipe_of(cfg).phases, cfg.training.lr_wsd_decay_style
    rewarmups = tuple((p.first_step, p.lr_warmup_iters) for p in phases if p.lr_warmup_iters)
    rates = tuple((p.first_step, p.last_step, p.lr, p.lr_end, (p.lr_wsd_decay_style or style) if p.lr_decay else None)
                  for p in phases) if shaped else ()
    return rewarmups, rates


def check_recipe_against_model(cfg: Config, recipe: Recipe, world_size: int = 1) -> None:
    """Every phase's sequence length within the model's positions and split evenly by the layout, and its global
    batch split into micro-batches over the data-parallel ranks of ``world_size`` processes."""
    positions = resolved_shape(cfg.model)["seq_length"]
    p = cfg.parallel
    tp = p.tensor_model_parallel_size
    unit = (cfg.training.micro_batch_size or 1) * max(1, world_size // max(1, tp * p.pipeline_model_parallel_size))
    for phase in recipe.phases:
        where = _name(phase.index)
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
    streams = {(phase.data_path, phase.seq_length) for phase in recipe.phases}
    if cfg.checkpoint.continue_from and len(streams) > 1:
        raise ConfigError("--continue-from with phases that change the data or the sequence length is not built yet "
                          "(each phase reads its samples by position from the run's step 1); start the recipe with "
                          "--init-from, or give its phases one data and one length")


def apply_recipe(cfg: Config) -> Config:
    """``cfg`` with its ``phases:`` written into the settings the rest of the run reads: the run's length (from
    tokens), the objective sequence and its switch steps, a decay phase's length and shape; and --save-at-tokens as
    the steps that reach them. A config without ``phases:`` keeps its --objective and switches (they are its
    phases)."""
    return _with_save_at_tokens(_apply_phases(cfg))


def _tokens_recipe(cfg: Config) -> Recipe:
    """The phases as far as lengths and tokens go: the objective-only form's switches never change them, so they
    are left out (they are placed by --switch's fractions of the length this finds)."""
    if cfg.recipe.phases:
        return recipe_of(cfg)
    one = dataclasses.replace(cfg.objective, objective=objective_phases(cfg.objective.objective)[0], switch=None,
                              switch_step=None)
    return recipe_of(dataclasses.replace(cfg, objective=one))


def _with_save_at_tokens(cfg: Config) -> Config:
    """--save-at-tokens N: the first step by which the run has trained N tokens joins --save-at."""
    c = cfg.checkpoint
    if not c.save_at_tokens:
        return cfg
    tokens = _tokens_recipe(cfg).tokens_through_steps
    steps = []
    for wanted in c.save_at_tokens:
        step = next((s for s, done in enumerate(tokens) if s and done >= wanted), None)
        if step is None or wanted < 1:
            raise ConfigError(f"--save-at-tokens {wanted:,} is outside this run's {tokens[-1]:,} tokens; drop it or "
                              "lengthen the run")
        steps.append(step)
    save_at = sorted({*c.save_at, *steps})
    return dataclasses.replace(cfg, checkpoint=dataclasses.replace(c, save_at=save_at))


def _apply_phases(cfg: Config) -> Config:
    if not cfg.recipe.phases:
        if cfg.training.train_tokens is None:
            return cfg
        # The run's length first (one sequence length: the objectives do not change it), then --switch's fractions
        # of it place the switches.
        return _with_length(cfg, _tokens_recipe(cfg))
    recipe = recipe_of(cfg)
    cfg = _with_length(cfg, recipe)
    collapsed: list[str] = []
    switches: list[int] = []
    for phase in recipe.phases:
        if collapsed and collapsed[-1] == phase.objective:
            continue
        if collapsed:
            switches.append(phase.first_step - 1)
        collapsed.append(phase.objective)
    given = objective_phases(cfg.objective.objective)
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
            raise ConfigError(f"{_name(decay.index)} sets lr_decay, the WSD decay, but --lr-decay-style is "
                              f"{t.lr_decay_style}; use --lr-decay-style wsd")
        t = dataclasses.replace(t, lr_wsd_decay_iters=decay.steps, lr_wsd_decay_fraction=None,
                                lr_wsd_decay_style=decay.lr_wsd_decay_style or t.lr_wsd_decay_style)
    return dataclasses.replace(cfg, objective=o, training=t)


def _with_length(cfg: Config, recipe: Recipe) -> Config:
    """The run's --train-iters: the phases' last step (from --train-tokens or phase lengths in tokens)."""
    if cfg.training.train_iters == recipe.last_step:
        return cfg
    return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, train_iters=recipe.last_step))
