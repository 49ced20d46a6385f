"""What a run does with its recipe's phases (megamlm/config/phases.py) besides the step, which asks the recipe
itself (``Recipe.at``): each phase's sample stream, the start-up lines, and the comparison of a checkpoint's phases
with a launch's.

- The stream: the phases grouped into segments of one data and sequence length (``stream_segments``), read as
  ``data/phase_streams.py`` promises; a run of one segment reads ``build_train_dataset``'s stream as before.
- On resume, the phase rows of ``training/resume.py``'s comparison (``recipe_start``; their fields and roles declared
  beside the phase fields) are compared here, from the checkpoint's and the launch's run records: the phases that
  have started must agree in every compared setting, and so must those after them (``phase_differences``), except
  that a phase that has not started may be longer (logged) or, at a checkpoint on a phase boundary of either recipe,
  differ (a branch there, logged; ``phase_layout``). The study planner shares a prefix by the same settings, step by
  step (``phase_settings_by_step``), and asks the resume's own check where.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from megamlm.config import Config
from megamlm.config.phases import Recipe, compared_phase_fields
from megamlm.data import StreamSpec, build_train_dataset
from megamlm.data.phase_streams import RecipeStreamSpec, StreamSegment, build_recipe_dataset
from megamlm.errors import ResumeError


def stream_segments(recipe: Recipe, default_data: list[str], end_sample: int) -> tuple[StreamSegment, ...]:
    """Consecutive phases of one data and sequence length as one segment (``default_data``: the run's data, for
    phases that name none); the last segment reaches ``end_sample`` at least (a resume with another batch size)."""
    segments: list[StreamSegment] = []
    for phase in recipe.phases:
        data = phase.data_path or tuple(default_data)
        stream = (data, phase.seq_length, phase.sample_mode)
        if segments and (segments[-1].data_path, segments[-1].seq_length, segments[-1].sample_mode) == stream:
            segments[-1] = dataclasses.replace(segments[-1], end_sample=phase.end_sample)
        else:
            segments.append(StreamSegment(data, phase.seq_length, phase.first_sample, phase.end_sample,
                                          phase.sample_mode))
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
                                              split=split, sample_mode=only.sample_mode), group)
    return build_recipe_dataset(RecipeStreamSpec(segments, cfg.training.seed, cfg.data.data_cache_path, vocab_size,
                                                 split, cfg.data.sample_mode), group)


def recipe_notes(recipe: Recipe) -> list[str]:
    """The start-up lines of a run in more than one phase (none for one phase)."""
    if len(recipe.phases) == 1:
        return []
    return [f"recipe of {len(recipe.phases)} phases:"] + [f"  {line}" for line in recipe.describe()]


def _as_phase_dict(phase: dict, compared: tuple[str, ...]) -> dict:
    """A phase as a run record keeps it, with what a record written before a setting existed means: the run's batch
    (None), the RoPE bases split into their two fields, None for any other compared field."""
    theta, local = phase.get("rope_bases", (None, None))
    defaults = {"global_batch_size": None, "rope_theta": theta, "local_rope_theta": local}
    plain = {key: list(value) if isinstance(value, tuple) else value for key, value in phase.items()}
    return {**{key: defaults.get(key) for key in compared}, **plain}


def phase_settings_by_step(recipe: Recipe) -> list[str]:
    """The compared phase settings (``compared_phase_fields``) of every step 1..last, one text per step (equal
    texts: the same settings), as the study planner compares two runs' steps (study/planning/prefixes.py): the
    values a resume compares (``phase_differences``), from the same phase dicts."""
    compared, texts = compared_phase_fields(), []
    for phase in recipe.phases:
        settings = _as_phase_dict(phase.to_dict(), compared)
        texts += [repr([settings[key] for key in compared])] * phase.steps
    return texts


def _phase_at(phases: list[dict], step: int) -> dict:
    return next((p for p in phases if step <= p["last_step"]), phases[-1])


class RecipeStart(NamedTuple):
    """What the recipe's layout allows a start at a step (``phase_layout``): the notes to log, and whether the phases
    after the checkpoint differ (a branch at a phase boundary)."""

    notes: list[str]
    branch: bool = False


class PhaseDifference(NamedTuple):
    """A phase setting that differs between a checkpoint's recipe and a launch's where they must agree (a row of
    training/resume.py's comparison): the sentence naming the phase, field, values and step, and the field's role."""

    sentence: str
    role: str


FIX = "restore it, or branch at a phase boundary (--load the checkpoint written at the end of a phase)"


def as_phase_dicts(saved: list[dict], launch: list[dict], compared: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """Both recipes as run records keep them, with a compared field a record predates read as ``_as_phase_dict``
    says."""
    return [_as_phase_dict(p, compared) for p in saved], [_as_phase_dict(p, compared) for p in launch]


def phase_differences(old: list[dict], new: list[dict], step: int, rows: tuple[tuple[str, str], ...]
                      ) -> list[PhaseDifference]:
    """The compared phase settings (``rows``: (field, role), from the roles declared beside the phase fields) that
    differ for a start at ``step``: every step done must have trained with the same settings (the history, one
    stretch at a time); inside a phase, the phases after it must be as they were (at a phase boundary they may
    differ: ``phase_layout``'s branch)."""
    s, found = 1, []
    while s <= step:
        before, now = _phase_at(old, s), _phase_at(new, s)
        found += [PhaseDifference(f"phase {now['index'] + 1}.{key} is {now[key]!r} in this launch's recipe, but step "
                                  f"{s} (the checkpoint is at step {step}) trained with {before[key]!r}", role)
                  for key, role in rows if before[key] != now[key]]
        s = min(before["last_step"], now["last_step"]) + 1
    if any(p["last_step"] == step for p in new + old):
        return found
    inside = f"the checkpoint is at step {step}, inside phase {_phase_at(new, step + 1)['index'] + 1}"
    later = zip(*([p for p in phases if p["first_step"] > step] for phases in (old, new)))
    return found + [PhaseDifference(f"phase {now['index'] + 1}.{key} is {before[key]!r} in the checkpoint's recipe "
                                    f"and {now[key]!r} in this launch's ({inside})", role)
                    for before, now in later for key, role in rows if before[key] != now[key]]


def phase_layout(old: list[dict], new: list[dict], step: int, compared: tuple[str, ...], listed: bool = True
                 ) -> RecipeStart:
    """Where the phases lie, for a start at ``step`` whose compared settings agree (``phase_differences``): a phase
    that starts at the same step starts at the same sample; where either recipe ends a phase at ``step`` (a phase
    boundary), the phases after it may differ (a branch there, as at an objective switch); inside a phase, that
    phase keeps its length and a phase that has not started may only be made longer (logged). Lengths are compared
    for a ``phases:`` list only (``listed``): the objective-only form's phases are placed by --switch and
    --train-iters, whose changes the history decides."""
    _check_first_samples(old, new)
    later_old, later_new = ([p for p in phases if p["first_step"] > step] for phases in (old, new))
    if any(p["last_step"] == step for p in new + old):
        def settings(phases):
            return [({k: p[k] for k in compared}, p["last_step"] - p["first_step"]) for p in phases]
        if settings(later_old) != settings(later_new):
            return RecipeStart([f"branch after step {step}, a phase boundary: the phases after it are this "
                                "launch's"], branch=True)
        return RecipeStart([])
    return RecipeStart(_later_phases(old, new, later_old, later_new, step, listed))


def _check_first_samples(old: list[dict], new: list[dict]) -> None:
    """Phases that read other data or lengths read their samples by position in the stream: a phase that starts at
    the same step must start at the same sample (another global batch size or ramp-up would move it)."""
    if len({(tuple(p["data_path"]), p["seq_length"]) for p in new}) == 1:
        return
    for before, now in zip(old, new):
        if before["first_step"] == now["first_step"] and before["first_sample"] != now["first_sample"]:
            raise ResumeError(f"phase {now['index'] + 1} starts at sample {now['first_sample']} of the stream in this "
                              f"launch's recipe and at {before['first_sample']} in the checkpoint's: another global "
                              "batch size or ramp-up moves a phase's data; keep the checkpoint's --global-batch-size "
                              "and --rampup-batch-size")


def _later_phases(old, new, later_old, later_new, step: int, listed: bool) -> list[str]:
    """A start inside a phase: that phase keeps its length, and a phase not started yet may be made longer (the
    notes saying so)."""
    current_old, current_new = _phase_at(old, step + 1), _phase_at(new, step + 1)
    inside = f"the checkpoint is at step {step}, inside phase {current_new['index'] + 1}"
    last = current_new is new[-1] and current_old is old[-1]
    if listed and current_old["last_step"] != current_new["last_step"] and not last:
        raise ResumeError(f"phase {current_new['index'] + 1} ends at step {current_new['last_step']} in this launch's "
                          f"recipe and at {current_old['last_step']} in the checkpoint's, and it has started (the "
                          f"checkpoint is at step {step}): restore its length; only a phase that has not started "
                          "may be made longer")
    if len(later_old) != len(later_new) and listed:
        raise ResumeError(f"the checkpoint's recipe has {len(old)} phases and this launch's {len(new)} ({inside}): "
                          f"{FIX}")
    notes = []
    for before, now in zip(later_old, later_new):
        where = f"phase {now['index'] + 1}"
        old_steps, new_steps = before["last_step"] - before["first_step"], now["last_step"] - now["first_step"]
        if listed and new_steps < old_steps:
            raise ResumeError(f"{where} is {new_steps + 1} steps in this launch's recipe and {old_steps + 1} in the "
                              f"checkpoint's: a phase that has not started may only be made longer; {FIX}")
        if listed and new_steps > old_steps:
            notes.append(f"{where} made longer: {new_steps + 1} steps, {now['first_step']}-{now['last_step']} (was "
                         f"{old_steps + 1})")
    return notes
