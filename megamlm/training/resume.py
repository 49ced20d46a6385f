"""Which checkpoint a launch continues from, and whether it may: checked in one place, before any model exists.

Launching the same command again continues from the newest whole checkpoint of its ``--save`` folder
(incomplete or damaged ones are skipped with a warning), else from ``--load``. Each difference between the
checkpoint's record and this launch is either honoured exactly or refused with one line naming the stored
value, the given one and the flag that would accept it:

- seed, data, sequence length, masking, tokenizer ids and model shape decide the sample stream, the masks
  and the weights' meaning: refused (``--override-data`` accepts other data; ``--init-from`` starts a new
  run from the weights);
- the global batch size: honoured, the same sample stream continues at the consumed-sample count;
- ``--train-iters``, the objective schedule, the LR schedule and the optimizer settings: refused unless
  ``--override-schedule`` says this launch's values win (each change is logged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from megamlm.checkpoint.catalog import CONFIG, list_checkpoints
from megamlm.checkpoint.checkpointer import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    find_checkpoint,
    read_train_state,
    resolve_checkpoint,
)
from megamlm.config import Config
from megamlm.errors import ResumeError
from megamlm.log import log

# Settings that fix the sample stream, the masks or the meaning of the weights: (record path, flag).
_FIXED = (
    (("config", "training", "seed"), "--seed"),
    (("config", "objective", "mask_ratio"), "--mask-ratio"),
    (("config", "objective", "mask_replace_prob"), "--mask-replace-prob"),
    (("config", "objective", "mask_random_prob"), "--mask-random-prob"),
    (("config", "objective", "mask_keep_prob"), "--mask-keep-prob"),
    (("tokenizer", "mask_id"), "the tokenizer's mask id (--tokenizer-model)"),
    (("tokenizer", "vocab_size"), "the tokenizer's vocabulary (--tokenizer-model)"),
)
# Settings of the optimization itself: changed only with --override-schedule.
_SCHEDULE = (
    (("schedule", "objective_schedule", "train_iters"), "--train-iters"),
    (("schedule", "objective_schedule", "objective"), "--objective"),
    (("schedule", "objective_schedule", "switch_step"), "--switch (the switch step)"),
    (("schedule", "lr_schedule", "peak_lr"), "--lr"),
    (("schedule", "lr_schedule", "min_lr"), "--min-lr"),
    (("schedule", "lr_schedule", "style"), "--lr-decay-style"),
    (("schedule", "lr_schedule", "warmup_iters"), "--lr-warmup-iters"),
    (("schedule", "lr_schedule", "decay_iters"), "--lr-wsd-decay-iters"),
    (("config", "training", "weight_decay"), "--weight-decay"),
    (("config", "training", "adam_beta1"), "--adam-beta1"),
    (("config", "training", "adam_beta2"), "--adam-beta2"),
    (("config", "training", "adam_eps"), "--adam-eps"),
    (("config", "training", "clip_grad"), "--clip-grad"),
)
_SHAPE_FLAGS = {"max_seq_length": "--seq-length"}
_MISSING = object()


@dataclass
class Resume:
    path: Path
    train_state: dict
    override_schedule: bool = False
    """This launch's schedules replace the checkpoint's (``--override-schedule`` with a difference)."""
    notes: list[str] = field(default_factory=list)

    @property
    def step(self) -> int:
        return int(self.train_state["step"])


def checkpoint_to_resume(cfg: Config) -> Path | None:
    """The newest whole checkpoint of ``--save`` (a relaunch), else ``--load``'s, else None."""
    c = cfg.checkpoint
    path = None
    if c.save and list_checkpoints(c.save):
        # The run's own checkpoints win over --load/--init-from: a requeued job must not restart from them.
        path = find_checkpoint(c.save)
        start = c.load or c.init_from
        if path is None and not c.overwrite_damaged:
            raise CheckpointError(
                f"every checkpoint in --save {c.save} is damaged (see the warnings above); starting from "
                f"{start or 'scratch'} would replace them as this run saves. Pass --overwrite-damaged to do that, "
                "or another --save to keep them")
        if path is None:
            log(f"no complete checkpoint in --save {c.save} (see the warnings above): starting from "
                f"{start or 'scratch'}; --overwrite-damaged lets this run's checkpoints replace them")
        elif start:
            log(f"--save {c.save} already holds checkpoints of this run: resuming from {path} "
                f"instead of starting from {start}")
    if path is None and c.load and c.save and Path(c.load).resolve() == Path(c.save).resolve():
        # Megatron's launch-and-requeue command (--save X --load X): its first launch starts the run.
        log(f"--load {c.load} is this run's --save folder and holds no checkpoint to resume yet: starting from "
            f"{c.init_from or 'scratch'}")
        return None
    if path is None and c.load:
        path = resolve_checkpoint(c.load)
    return path


def _get(record: dict, keys: tuple[str, ...]):
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return _MISSING
        record = record[key]
    return record


def _differences(saved: dict, current: dict, fields) -> list[tuple[str, object, object]]:
    out = []
    for keys, flag in fields:
        old, new = _get(saved, keys), _get(current, keys)
        if old is not _MISSING and new is not _MISSING and old != new:
            out.append((flag, old, new))
    return out


def _describe(diffs) -> str:
    return "; ".join(f"{flag} is {old!r} in the checkpoint and {new!r} here" for flag, old, new in diffs)


def plan_resume(cfg: Config, record: dict) -> Resume | None:
    """The checkpoint this launch continues, checked against this launch's ``record``; raises ResumeError."""
    path = checkpoint_to_resume(cfg)
    if path is None:
        return None
    train_state = read_train_state(path)
    if train_state.get("format", 1) < CHECKPOINT_FORMAT:
        raise ResumeError(
            f"cannot resume {path}: it was written by megamlm 0.1 (checkpoint format {train_state.get('format', 1)}), "
            f"whose sample order this version (format {CHECKPOINT_FORMAT}) does not reproduce; finish the run with "
            f"megamlm 0.1, or start a new run from its weights with --init-from {path}")
    saved = json.loads((path / CONFIG).read_text())
    resume = Resume(path, train_state)
    fresh = f"start a new run from its weights with --init-from {path}"

    shape, saved_shape = record["model_args"], saved.get("model_args") or {}
    fixed = [(_SHAPE_FLAGS.get(k, f"--{k.replace('_', '-')}"), saved_shape.get(k), v) for k, v in shape.items()
             if saved_shape.get(k) != v]
    fixed += _differences(saved, record, _FIXED)
    if fixed:
        raise ResumeError(f"cannot resume {path}: {_describe(fixed)}; these fix the samples, the masks or the "
                          f"weights' shape, so relaunch with the checkpoint's values, or {fresh}")

    if saved.get("data_fingerprint") != record["data_fingerprint"]:
        what = (f"checkpoint {path} was trained on other data (fingerprint {saved.get('data_fingerprint')}, data "
                f"{saved.get('data_path')}) than this run (fingerprint {record['data_fingerprint']}, data "
                f"{record['data_path']})")
        if not cfg.checkpoint.override_data:
            raise ResumeError(f"{what}; resuming would continue its sample order on different data. Pass the same "
                              f"--data-path, or --override-data to continue on the new data deliberately, or {fresh}")
        resume.notes.append(f"{what}; continuing on the new data because of --override-data")

    changed = _differences(saved, record, _SCHEDULE)
    if changed and not cfg.checkpoint.override_schedule:
        raise ResumeError(f"cannot resume {path}: {_describe(changed)}; pass --override-schedule to continue with "
                          "this launch's values, or relaunch with the checkpoint's")
    if changed:
        if cfg.training.train_iters <= resume.step:
            raise ResumeError(f"cannot resume {path} at step {resume.step} with --train-iters "
                              f"{cfg.training.train_iters}: nothing would be left to train; raise --train-iters")
        resume.override_schedule = True
        resume.notes.append(f"--override-schedule: {_describe(changed)}; this launch's values win from step "
                            f"{resume.step + 1}")

    saved_gbs = _get(saved, ("config", "training", "global_batch_size"))
    if saved_gbs is not _MISSING and saved_gbs != cfg.training.global_batch_size:
        consumed = train_state["state"]["progress"]["consumed_samples"]
        resume.notes.append(f"--global-batch-size is {saved_gbs} in the checkpoint and "
                            f"{cfg.training.global_batch_size} here: the same sample stream continues at sample "
                            f"{consumed} with the new batch size")
    return resume
