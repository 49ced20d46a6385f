"""A recipe in phases: the ``phases:`` list (or the objective-only ``--objective a,b --switch ...``) resolved once,
at start-up, into phases with their settings, step ranges, sample ranges and token counts (``recipe_of``). The
resolved run holds the result (training/resolved_run.py) and every reader is handed it; the step asks it what step
k is (``Recipe.at``). Nothing after the start resolves it again (tests/unit/test_code_rules.py keeps it so).

A phase sets what it names (``config/phase_fields.py``: length, objective, data, sequence length, RoPE base, mask
ratio and split, the WSD decay) and inherits the rest from the phase before; the first inherits the run's flags.
Which fields are inherited, and from which run setting, is declared there, beside each field's role and check.
Phase p trains steps ``first_step..last_step`` and consumes the stream's samples ``first_sample..end_sample - 1``
(the steps' global batches, ``config/rampup.py``), tokens = samples x its sequence length. Lengths in tokens end a
phase at the first step by which it has trained that many. Lengths must add up to the run (``--train-iters``, or
``--train-tokens``); the last phase may leave its length out and runs to the end.

``apply_recipe``, part of resolving the config, writes what the recipe decides into the run settings that carry it
for the whole run: the objective sequence and its switch steps (the ObjectiveSchedule's stages), a decay phase's
length and shape (the WSD decay of the one LR schedule) and the run's length from tokens.
"""

from __future__ import annotations

import bisect
import dataclasses
from array import array
from dataclasses import dataclass
from typing import NamedTuple

from megamlm.config import phase_fields as declarations
from megamlm.config.derived import fraction_step, objective_stages, resolved_shape, switch_steps
from megamlm.config.phase_fields import PhaseConfig
from megamlm.config.rampup import BatchSizes
from megamlm.config.roles import ROLES
from megamlm.config.sections import Config
from megamlm.config.setting_checks import MASK_PROBS, check_items, masking_problem, phase_name
from megamlm.errors import ConfigError

ROPE = ("rope_theta", "local_rope_theta")
"""The phase fields a phase's ``rope_bases`` pair holds (the model's rotary tables are built from both)."""


def carried_fields(cls: type | None = None) -> list:
    """The inherited fields of a phase (config/phase_fields.py, kind ``carried``) of ``cls``, else of the declared
    PhaseConfig: what the resolution inherits, a Phase holds and the comparisons read, never a list kept elsewhere."""
    return [f for f in dataclasses.fields(cls or declarations.PhaseConfig) if f.metadata["kind"] == "carried"]


def compared_phase_fields(cls: type | None = None) -> tuple[str, ...]:
    """The inherited phase settings compared stretch by stretch on resume (training/resume.py) and step by step by
    the study planner: those whose role (config/roles.py) refuses or notes a difference, the same rule as for the
    run-level settings. An objective or learning rate is the history's (compared per step); validation data never
    changes a step."""
    rules = [(f.name, ROLES[f.metadata["role"]]) for f in carried_fields(cls)]
    return tuple(name for name, rule in rules if rule.on_resume in ("refuse", "note") and not rule.per_step)


@dataclass(frozen=True)
class Phase:
    """One resolved phase: every setting it trains with (``settings``: each inherited phase field, read as an
    attribute: ``phase.mask_ratio``), and where it sits in the run."""

    index: int
    """0-based place in the recipe (the log and errors say ``phase index + 1``)."""
    first_step: int
    last_step: int
    first_sample: int
    end_sample: int
    """The samples of the stream it consumes: [first_sample, end_sample)."""
    settings: tuple[tuple[str, object], ...]
    """(name, value) of every inherited phase field (config/phase_fields.py, kind ``carried``): a data path is a
    tuple, () for the bundled corpus; a global batch size None for the run's."""
    lr_decay: bool = False
    lr_wsd_decay_style: str | None = None
    lr_warmup_iters: int | None = None
    """A re-warmup over the phase's first steps (None: none)."""
    lr: float | None = None
    """The phase's learning rate: the level it holds or decays from (None: the run's one WSD schedule, when no
    phase sets a learning rate of its own and only the last decays)."""
    lr_end: float | None = None
    """Where a decaying phase's learning rate ends: the next phase's ``lr``, or --min-lr for the last."""

    def __post_init__(self) -> None:
        for key, value in self.settings:  # each setting as an attribute, read without a call
            object.__setattr__(self, key, value)

    @property
    def rope_bases(self) -> tuple:
        """(RoPE base, the sliding-window layers' base or None): --rope-theta and --local-rope-theta of the phase."""
        return tuple(getattr(self, key) for key in ROPE)

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
        """The phase as a run record stores it (lists for tuples; ``rope_bases`` as records before kept it)."""
        plain = {key: list(value) if isinstance(value, tuple) else value for key, value in self.settings}
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "settings"}
        return {**fields, **plain, "rope_bases": list(self.rope_bases), "tokens": self.tokens}


class StepPlan(NamedTuple):
    """What 1-based step k is (``Recipe.at``): its phase and everything the step trains with."""

    phase: Phase
    """The phase that trains the step (its index, steps, samples, and every setting by name)."""
    objective: str
    """mlm, clm or mntp."""
    masking: tuple[float, float, float, float]
    """(mask ratio, replace, random, keep probabilities)."""
    seq_length: int
    """The phase's sample length."""
    rope_bases: tuple
    """(RoPE base, the sliding-window layers' base or None)."""
    data_path: tuple[str, ...]
    """The phase's data (() for the bundled corpus)."""
    batch_size: int
    """The step's global batch (in ``step_table``'s plans, its phase's first step's: the loop reads each step's from
    ``step_sizes``)."""
    lr_piece: tuple
    """(the phase's LR level or None, where a decay ends or None, decays: bool, a re-warmup's steps or None)."""


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
        index = bisect.bisect_left([p.last_step for p in self.phases], step)
        return self.phases[min(index, len(self.phases) - 1)]

    def at(self, step: int) -> StepPlan:
        """What 1-based ``step`` trains with: objective, masking, sequence length, RoPE bases, data, global batch and
        the phase's piece of the LR schedule (the rate itself: ``LRSchedule``, built from these pieces)."""
        p = self.phase_at(step)
        size = self.batch_size_at(step) if step < len(self.samples_through) else None
        return StepPlan(p, p.objective, (p.mask_ratio, *(getattr(p, key) for key in MASK_PROBS)), p.seq_length,
                        p.rope_bases, p.data_path, size, (p.lr, p.lr_end, p.lr_decay, p.lr_warmup_iters))

    def step_table(self) -> tuple[tuple[StepPlan, ...], array]:
        """``at`` of every step as a table the loop indexes without a call: each phase's plan (as at its first step)
        and the phase of each step (step k at index k - 1)."""
        plans = tuple(self.at(p.first_step) for p in self.phases)
        return plans, array("H", (p.index for p in self.phases for _ in range(p.steps)))

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

    def learning_rate_pieces(self, decay_style: str) -> tuple[tuple, tuple]:
        """What the phases add to the one LR schedule (training/lineage.py builds it): (first step, steps) of every
        re-warmup, and (first step, last step, learning rate, end or None, decay shape or None) of every phase where
        the phases set their rates (a phase's ``lr`` is set only then, ``_with_learning_rates``)."""
        rewarmups = tuple((p.first_step, p.lr_warmup_iters) for p in self.phases if p.lr_warmup_iters)
        rates = tuple((p.first_step, p.last_step, p.lr, p.lr_end,
                       (p.lr_wsd_decay_style or decay_style) if p.lr_decay else None)
                      for p in self.phases) if self.phases[0].lr is not None else ()
        return rewarmups, rates

    def to_list(self) -> list[dict]:
        """The phases as stored in the run record and every checkpoint's record (``recipe``)."""
        return [p.to_dict() for p in self.phases]

    def describe(self) -> list[str]:
        return [p.describe() for p in self.phases]


def phase_items(cfg: Config) -> list[PhaseConfig]:
    """The phases as given: the ``phases:`` list, else the objective-only form of --objective and its switches."""
    if cfg.recipe.phases:
        return list(cfg.recipe.phases)
    objectives = objective_stages(cfg.objective.objective)
    ends = (*switch_steps(cfg.objective, cfg.training.train_iters), cfg.training.train_iters)
    starts = (0, *ends[:-1])
    # The last phase runs to the end of the run (--train-iters, or --train-tokens' step).
    return [PhaseConfig(steps=end - start if end != ends[-1] else None, objective=objective)
            for objective, start, end in zip(objectives, starts, ends)]


def _check_masking(index: int, item: PhaseConfig, settings: dict) -> None:
    """A phase that sets a mask probability: the three it trains with (inherited ones included) as the flags'."""
    probs = tuple(settings[key] for key in MASK_PROBS)
    problem = masking_problem(probs) if any(getattr(item, key) is not None for key in MASK_PROBS) else None
    if problem:
        raise ConfigError(f"{phase_name(index)} masks with replace/random/keep {probs}: {problem}")


_BASE_AS = {"objective": lambda cfg, value: objective_stages(value)[0],
            "seq_length": lambda cfg, value: resolved_shape(cfg.model)["seq_length"],
            "global_batch_size": lambda cfg, value: None}
"""What the first phase inherits where it is not the run setting's value as given: the first objective of the
sequence, the model's resolved length, and None for the run's batch (its --global-batch-size or ramp-up)."""


def _base(cfg: Config, cls: type) -> dict:
    """What the first phase inherits: each inherited phase field's run setting (config/phase_fields.py)."""
    base = {}
    for f in carried_fields(cls):
        section, _, name = (f.metadata["run_setting"] or "..").partition(".")
        value = getattr(getattr(cfg, section), name) if section else None
        value = _BASE_AS[f.name](cfg, value) if f.name in _BASE_AS else value
        base[f.name] = tuple(value) if isinstance(value, list) else value
    return base


class _Walk:
    """Steps, samples and tokens consumed so far, step by step (a ramp-up's batch depends on the samples
    consumed): the one walk that places every phase's end."""

    def __init__(self, sizes: BatchSizes):
        self.sizes = sizes
        self.samples = [0]
        self.tokens = [0]

    @property
    def step(self) -> int:
        return len(self.samples) - 1

    def until(self, measure: str, target: int, seq_length: int, global_batch_size: int | None) -> None:
        """Steps at ``seq_length`` (of ``global_batch_size`` samples, else the run's) until the run's ``measure``
        (``step`` or ``tokens``) reaches ``target``."""
        while (self.step if measure == "step" else self.tokens[-1]) < target:
            size = global_batch_size or self.sizes.size_after(self.samples[-1])
            self.samples.append(self.samples[-1] + size)
            self.tokens.append(self.tokens[-1] + size * seq_length)


def _phase_end(item: PhaseConfig, cfg: Config, walk: _Walk, shares: float) -> tuple[str, int]:
    """Where a phase ends, as (measure, target) for ``_Walk.until``: its own steps or tokens from where it starts,
    the shares so far of the run (as --switch's fractions place a switch), or the run's end."""
    t = cfg.training
    if item.steps is not None:
        return "step", walk.step + item.steps
    if item.tokens is not None:
        return "tokens", walk.tokens[-1] + item.tokens
    if item.fraction is not None:
        if t.train_tokens is not None:
            return "tokens", round(shares * t.train_tokens)
        return "step", fraction_step(shares, t.train_iters)
    return ("tokens", t.train_tokens) if t.train_tokens is not None else ("step", t.train_iters)


def recipe_of(cfg: Config) -> Recipe:
    """The run's phases, resolved (``cfg`` with its batch sizes fitted: ``resolve.py`` calls this after fitting
    them); raises ConfigError naming the phase, the field and the fix. Called at start-up only: the resolved run
    holds the result."""
    items = phase_items(cfg)
    check_items(cfg, items)
    cls = type(items[0])
    walk, settings, phases, shares = _Walk(BatchSizes.of(cfg.training)), _base(cfg, cls), [], 0.0
    for index, item in enumerate(items):
        given = {f.name: getattr(item, f.name) for f in carried_fields(cls)
                 if getattr(item, f.name) is not None}
        settings = {**settings, **{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}}
        _check_masking(index, item, settings)
        first_step, first_sample = walk.step + 1, walk.samples[-1]
        shares += item.fraction or 0.0
        walk.until(*_phase_end(item, cfg, walk, shares), settings["seq_length"], settings["global_batch_size"])
        if walk.step < first_step:
            raise ConfigError(f"{phase_name(index)} starts after the run's end (step {walk.step}); the phases "
                              "before it fill the run: shorten them, or lengthen the run")
        phases.append(Phase(index, first_step, walk.step, first_sample, walk.samples[-1], tuple(settings.items()),
                            bool(item.lr_decay), item.lr_wsd_decay_style, item.lr_warmup_iters))
        if item.lr_warmup_iters is not None and item.lr_warmup_iters > phases[-1].steps:
            raise ConfigError(f"{phase_name(index)}.lr_warmup_iters {item.lr_warmup_iters} is longer than the phase's "
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
                raise ConfigError(f"{phase_name(index)} decays before the last phase: give {phase_name(index + 1)} "
                                  f"the lr it decays to (e.g. lr: {level / 2:g})")
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


def learning_rate_pieces_of(cfg: Config, recipe: Recipe | None = None) -> tuple[tuple, tuple]:
    """``Recipe.learning_rate_pieces`` of the run's recipe (``recipe``: the resolved run's; None: resolved here, for
    a planner or script that has only the config), () and () where no phase shapes the rate."""
    items = list(cfg.recipe.phases)
    if not (any(item.lr_warmup_iters for item in items) or _sets_learning_rates(items)):
        return (), ()
    return (recipe or recipe_of(cfg)).learning_rate_pieces(cfg.training.lr_wsd_decay_style)
