"""What the loop does with a recipe's phases (megamlm/config/phases.py): each phase's sample stream, masking and
RoPE base, entered at its first step; the phases kept in the run record; a changed phase list refused on resume.

- The stream: the phases grouped into segments of one data and sequence length (``stream_segments``), read as
  ``data/phase_streams.py`` promises; a run of one segment reads ``build_train_dataset``'s stream as before.
- The masking of each phase is the ObjectiveSchedule's from the phase's first step (``set_phase_maskings``).
- The RoPE base: the model's rotary tables are rebuilt when a step's phase has another base than the tables hold
  (``PhaseTracker.enter``), on every rank and pipeline stage alike, also at the first step of a resumed launch.
- On resume, ``check_resumed_recipe`` compares the checkpoint's phases with this launch's: the phases that have
  started must agree in every setting (``PHASE_SETTINGS``), and so must those after them, except a phase that has
  not started may be longer (logged) or, at a checkpoint on a phase boundary of either recipe, differ (a branch
  there, logged). The study planner shares a prefix by the same settings, step by step (``phase_settings_by_step``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from megamlm.config import Config
from megamlm.config.phases import Phase, Recipe
from megamlm.data import StreamSpec, build_train_dataset
from megamlm.data.phase_streams import RecipeStreamSpec, StreamSegment, build_recipe_dataset
from megamlm.errors import ResumeError
from megamlm.model.rope import set_rotary_bases
from megamlm.objectives import ObjectiveSchedule
from megamlm.objectives.masking import MaskingSpec


def stream_segments(recipe: Recipe, default_data: list[str], end_sample: int) -> tuple[StreamSegment, ...]:
    """Consecutive phases of one data and sequence length as one segment (``default_data``: the run's data, for
    phases that name none); the last segment reaches ``end_sample`` at least (a resume with another batch size)."""
    segments: list[StreamSegment] = []
    for phase in recipe.phases:
        data = phase.data_path or tuple(default_data)
        if segments and (segments[-1].data_path, segments[-1].seq_length) == (data, phase.seq_length):
            segments[-1] = dataclasses.replace(segments[-1], end_sample=phase.end_sample)
        else:
            segments.append(StreamSegment(data, phase.seq_length, phase.first_sample, phase.end_sample))
    segments[-1] = dataclasses.replace(segments[-1], end_sample=max(segments[-1].end_sample, end_sample))
    return tuple(segments)


def recipe_dataset(cfg: Config, recipe: Recipe, data_path: list[str], end_sample: int, vocab_size: int, split,
                   group=None):
    """The run's training samples up to ``end_sample``: one stream for one segment (exactly the one-phase
    stream), else the phases' streams (``data/phase_streams.py``)."""
    segments = stream_segments(recipe, data_path, end_sample)
    if len(segments) == 1:
        (only,) = segments
        return build_train_dataset(StreamSpec(only.data_path, only.seq_length, only.end_sample, cfg.training.seed,
                                              cache_dir=cfg.data.data_cache_path, vocab_size=vocab_size,
                                              split=split, sample_mode=cfg.data.sample_mode), group)
    return build_recipe_dataset(RecipeStreamSpec(segments, cfg.training.seed, cfg.data.data_cache_path, vocab_size,
                                                 split, cfg.data.sample_mode), group)


def phase_masking(base: MaskingSpec, phase: Phase) -> MaskingSpec:
    return dataclasses.replace(base, mask_ratio=phase.mask_ratio, replace_prob=phase.mask_replace_prob,
                               random_prob=phase.mask_random_prob, keep_prob=phase.mask_keep_prob)


def set_masking(schedule: ObjectiveSchedule, recipe: Recipe) -> None:
    """Each phase's masking from its first step on; a run whose phases keep the run's masking is left as it was."""
    maskings = [(phase.first_step, phase_masking(schedule.masking, phase)) for phase in recipe.phases]
    if any(spec != schedule.masking for _, spec in maskings):
        schedule.set_phase_maskings(maskings)


class PhaseTracker:
    """The phase the model is in: its RoPE base applied at the first step of a phase that changes it."""

    def __init__(self, recipe: Recipe, model, built_bases: tuple):
        self.recipe, self.model = recipe, model
        self.bases = built_bases
        self.phase: Phase | None = None

    def enter(self, step: int) -> str | None:
        """Before 1-based ``step``: apply its phase's RoPE base if it is not the one the tables hold; the line to log
        when the phase changed since the last step (None otherwise)."""
        phase = self.recipe.phase_at(step)
        if self.phase is not None and phase.index == self.phase.index:
            return None
        entered, self.phase = self.phase is not None, phase
        if phase.rope_bases != self.bases:
            set_rotary_bases(self.model, *phase.rope_bases)
            self.bases = phase.rope_bases
        if not entered and step == phase.first_step == 1:
            return None
        return f"{'entering' if entered else 'in'} {phase.describe()}"


def recipe_notes(recipe: Recipe) -> list[str]:
    """The start-up lines of a run in more than one phase (none for one phase)."""
    if len(recipe.phases) == 1:
        return []
    return [f"recipe of {len(recipe.phases)} phases:"] + [f"  {line}" for line in recipe.describe()]


PHASE_SETTINGS = ("data_path", "seq_length", "rope_bases", "mask_ratio", "mask_replace_prob", "mask_random_prob",
                  "mask_keep_prob", "global_batch_size")
"""What a phase sets beyond the history (the objective and learning rate of every step, which ``resume.py``
compares step by step, branches and ``--override-schedule`` included): the settings its steps train with, which a
resume compares stretch by stretch and the study planner step by step (``phase_settings_by_step``)."""


def _as_phase_dict(phase: dict) -> dict:
    # A record written before a phase could set its own batch has none: the run's batch, as None means now.
    return {"global_batch_size": None, **phase, "data_path": list(phase["data_path"]),
            "rope_bases": list(phase["rope_bases"])}


def phase_settings_by_step(recipe: Recipe) -> list[str]:
    """The phase settings (``PHASE_SETTINGS``) of every step 1..last, one text per step (equal texts: the same
    settings), as the study planner compares two runs' steps (study/planning/prefixes.py): the values
    ``check_resumed_recipe`` compares, from the same phase dicts."""
    texts = []
    for phase in recipe.phases:
        settings = _as_phase_dict(phase.to_dict())
        texts += [repr([settings[key] for key in PHASE_SETTINGS])] * phase.steps
    return texts


def _phase_at(phases: list[dict], step: int) -> dict:
    return next((p for p in phases if step <= p["last_step"]), phases[-1])


class RecipeStart(NamedTuple):
    """What ``check_resumed_recipe`` allows: the notes to log, and whether the phases after the checkpoint differ
    (a branch at a phase boundary)."""

    notes: list[str]
    branch: bool = False


def check_resumed_recipe(saved: list[dict] | None, recipe: Recipe, step: int, listed: bool = True,
                         accepted: tuple[str, ...] = ()) -> RecipeStart:
    """The checkpoint's phases (``saved``: its run record's ``recipe``) against this launch's, for a start at
    ``step`` (``training/resume.py`` asks, as part of its one comparison): one ResumeError line naming the phase and
    field that differ, or the notes of what is allowed.

    Every step up to ``step`` must have trained with the same phase settings (the history). Where either recipe
    ends a phase at ``step`` (a phase boundary: this launch's, or the checkpoint's, whose phase this launch
    continues instead), the phases after it may differ: a branch there, as at an objective switch (the study
    planner branches exactly there, study/planning/prefixes.py). Inside a phase, the phase goes on as it was and so
    do the phases after it, except that a phase that has not started may be made longer (logged). The lengths are
    compared for a ``phases:`` list only (``listed``): the objective-only form's phases are placed by --switch and
    --train-iters, whose changes the history decides (a budget or switch branch). A checkpoint written before
    phases were recorded is not compared.
    ``accepted``: phase settings the launch accepts changed (``data_path`` under --override-data)."""
    compared = tuple(key for key in PHASE_SETTINGS if key not in accepted)
    if saved is None:
        return RecipeStart([])
    old = [_as_phase_dict(p) for p in saved]
    new = [_as_phase_dict(p.to_dict()) for p in recipe.phases]
    fix = "restore it, or branch at a phase boundary (--load the checkpoint written at the end of a phase)"
    if len({(tuple(p["data_path"]), p["seq_length"]) for p in new}) > 1:
        # Phases that read other data or lengths read their samples by position in the stream: a phase that starts
        # at the same step must start at the same sample (another global batch size or ramp-up would move it).
        for before, now in zip(old, new):
            if before["first_step"] == now["first_step"] and before["first_sample"] != now["first_sample"]:
                raise ResumeError(f"phase {now['index'] + 1} starts at sample {now['first_sample']} of the stream in "
                                  f"this launch's recipe and at {before['first_sample']} in the checkpoint's: another "
                                  "global batch size or ramp-up moves a phase's data; keep the checkpoint's "
                                  "--global-batch-size and --rampup-batch-size")
    s = 1
    while s <= step:  # the history: every step done trained with the same settings (one stretch at a time)
        before, now = _phase_at(old, s), _phase_at(new, s)
        field = next((key for key in compared if before[key] != now[key]), None)
        if field is not None:
            raise ResumeError(f"phase {now['index'] + 1}.{field} is {now[field]!r} in this launch's recipe, but "
                              f"step {s} (the checkpoint is at step {step}) trained with {before[field]!r}: {fix}")
        s = min(before["last_step"], now["last_step"]) + 1
    if any(p["last_step"] == step for p in new + old):
        later_old = [p for p in old if p["first_step"] > step]
        later_new = [p for p in new if p["first_step"] > step]
        if [{k: p[k] for k in compared} for p in later_old] != [{k: p[k] for k in compared} for p in later_new] \
                or [p["last_step"] - p["first_step"] for p in later_old] != [
                    p["last_step"] - p["first_step"] for p in later_new]:
            return RecipeStart([f"branch after step {step}, a phase boundary: the phases after it are this "
                                "launch's"], branch=True)
        return RecipeStart([])
    current_old, current_new = _phase_at(old, step + 1), _phase_at(new, step + 1)
    last = current_new is new[-1] and current_old is old[-1]
    if listed and current_old["last_step"] != current_new["last_step"] and not last:
        raise ResumeError(f"phase {current_new['index'] + 1} ends at step {current_new['last_step']} in this launch's "
                          f"recipe and at {current_old['last_step']} in the checkpoint's, and it has started (the "
                          f"checkpoint is at step {step}): restore its length; only a phase that has not started "
                          "may be made longer")
    later_old = [p for p in old if p["first_step"] > step]
    later_new = [p for p in new if p["first_step"] > step]
    if len(later_old) != len(later_new) and listed:
        raise ResumeError(f"the checkpoint's recipe has {len(old)} phases and this launch's {len(new)} (the checkpoint "
                          f"is at step {step}, inside phase {current_new['index'] + 1}): {fix}")
    notes = []
    for before, now in zip(later_old, later_new):
        where = f"phase {now['index'] + 1}"
        field = next((key for key in compared if before[key] != now[key]), None)
        if field is not None:
            raise ResumeError(f"{where}.{field} is {before[field]!r} in the checkpoint's recipe and {now[field]!r} "
                              f"in this launch's (the checkpoint is at step {step}, inside phase "
                              f"{current_new['index'] + 1}): {fix}")
        old_steps, new_steps = before["last_step"] - before["first_step"], now["last_step"] - now["first_step"]
        if not listed:
            continue
        if new_steps < old_steps:
            raise ResumeError(f"{where} is {new_steps + 1} steps in this launch's recipe and {old_steps + 1} in the "
                              f"checkpoint's: a phase that has not started may only be made longer; {fix}")
        if new_steps > old_steps:
            notes.append(f"{where} made longer: {new_steps + 1} steps, {now['first_step']}-{now['last_step']} (was "
                         f"{old_steps + 1})")
    return RecipeStart(notes)
