"""How a launch starts, and whether it may: decided in one place, before any model exists.

Launching the same command again continues from the newest whole checkpoint of its ``--save`` folder
(incomplete or damaged ones are skipped with a warning), else from ``--load``; without either, ``--continue-from``
and ``--init-from`` start a new run from a checkpoint's weights. Each difference between a checkpoint's record
and this launch is either honoured exactly or refused with one line naming the stored value, the given one and
the flag that would accept it:

- seed, data, ``--split``, sequence length, masking, tokenizer ids and model shape decide the sample stream, the
  masks and the weights' meaning: refused (``--override-data`` accepts other data; ``--init-from`` starts a new
  run from the weights);
- the history (``training/lineage.py``): the objective and the learning rate of every step up to the
  checkpoint's, and the optimizer settings, must be the ones this launch's schedule gives those steps. Then the
  run continues exactly, also when the schedule differs after the checkpoint (a *branch*: another objective
  after a switch at the checkpoint's step, another step budget that shares the warmup and stable phase).
  Otherwise it is refused unless ``--override-schedule`` says this launch's values win from the next step;
- the global batch size: honoured, the same sample stream continues at the consumed-sample count (the lineage
  notes the change);
- on the CPU, torch's version, the processor, torch's CPU kernels and the intra-op thread count: honoured and
  noted in the lineage, since a continuation reproduces the uninterrupted run bitwise only where they agree.

``--continue-from CKPT`` takes the weights and the data position (consumed samples) of CKPT, with a fresh
optimizer, LR schedule and step count; the parent's seed, data, split and sequence length must be this run's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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
from megamlm.model.config import shape_record
from megamlm.training.lineage import (
    LR_FLAGS,
    OBJECTIVE_FLAGS,
    History,
    Segment,
    describe_changes,
    lineage_event,
)

# Settings that fix the sample stream, the masks or the meaning of the weights: (record path, flag).
_STREAM = (
    (("config", "training", "seed"), "--seed"),
    (("config", "data", "split"), "--split"),
    (("tokenizer", "mask_id"), "the tokenizer's mask id (--tokenizer-model)"),
    (("tokenizer", "vocab_size"), "the tokenizer's vocabulary (--tokenizer-model)"),
)
_MASKING = (
    (("config", "objective", "mask_ratio"), "--mask-ratio"),
    (("config", "objective", "mask_replace_prob"), "--mask-replace-prob"),
    (("config", "objective", "mask_random_prob"), "--mask-random-prob"),
    (("config", "objective", "mask_keep_prob"), "--mask-keep-prob"),
)
# What decides the last bits of a CPU run besides the config (run_record.arithmetic): where one differs from the
# checkpoint's, the run still continues exactly (same weights, optimizer state, samples and schedule), but its
# numbers can differ in the last bits from those of a run that never stopped, so it is noted, not refused.
_ARITHMETIC = (
    (("software", "torch"), "torch"),
    (("arithmetic", "cpu"), "the processor"),
    (("arithmetic", "cpu_capability"), "torch's CPU kernels"),
    (("arithmetic", "intra_op_threads"), "the intra-op thread count (torch.get_num_threads(), OMP_NUM_THREADS)"),
)
_SHAPE_FLAGS = {"max_seq_length": "--seq-length"}
_MISSING = object()

StartKind = Literal["fresh", "init", "continue", "resume", "branch", "override"]


@dataclass
class TrainProgress:
    """Where a run is: the last finished step and how many samples of the stream it has consumed."""

    step: int = 0
    consumed_samples: int = 0

    def advance(self, global_batch_size: int) -> None:
        self.step += 1
        self.consumed_samples += global_batch_size

    def state_dict(self) -> dict:
        return {"step": self.step, "consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.consumed_samples = int(state["step"]), int(state["consumed_samples"])


@dataclass
class Start:
    """How this launch starts: from scratch, from a checkpoint's weights, or from its whole state."""

    kind: StartKind
    history: History
    """The settings of every step this run's model will have been trained with (saved in its checkpoints)."""
    path: Path | None = None
    train_state: dict | None = None
    lineage: list[dict] = field(default_factory=list)
    """This run record's lineage (``training/lineage.py``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def restores_state(self) -> bool:
        """Weights, optimizer, RNG, data position and step counter (else weights at most)."""
        return self.kind in ("resume", "branch", "override")

    @property
    def restores_schedules(self) -> bool:
        """The checkpoint's objective and LR schedules are this launch's (else this launch's replace them)."""
        return self.kind == "resume"

    @property
    def step(self) -> int:
        return int(self.train_state["step"]) if self.train_state else 0

    def progress(self) -> TrainProgress:
        """Where the run starts: the checkpoint's step and data position, a parent's data position at step 0
        (``--continue-from``), or the very beginning."""
        progress = TrainProgress()
        if self.restores_state:
            progress.load_state_dict(self.train_state["state"]["progress"])
        elif self.kind == "continue":
            progress.consumed_samples = consumed_samples(self.train_state)
        return progress


def consumed_samples(train_state: dict) -> int:
    return int(train_state["state"]["progress"]["consumed_samples"])


def checkpoint_to_resume(cfg: Config) -> Path | None:
    """The newest whole checkpoint of ``--save`` (a relaunch), else ``--load``'s, else None."""
    c = cfg.checkpoint
    path = None
    if c.save and list_checkpoints(c.save):
        # The run's own checkpoints win over --load/--init-from/--continue-from: a requeued job must not restart.
        path = find_checkpoint(c.save)
        start = c.load or c.init_from or c.continue_from
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


def _shape_differences(saved: dict, record: dict) -> list[tuple[str, object, object]]:
    # A field this checkpoint's version did not record yet compares as its default.
    shape, saved_shape = record["model_args"], shape_record(saved.get("model_args") or {})
    return [(_SHAPE_FLAGS.get(k, f"--{k.replace('_', '-')}"), saved_shape.get(k), v) for k, v in shape.items()
            if saved_shape.get(k) != v]


def _read(path: Path, flag: str) -> tuple[dict, dict]:
    """(train state, run record) of a checkpoint of this megamlm version; a ResumeError for format 1."""
    train_state = read_train_state(path)
    if train_state.get("format", 1) < CHECKPOINT_FORMAT:
        raise ResumeError(
            f"cannot {flag} {path}: it was written by megamlm 0.1 (checkpoint format {train_state.get('format', 1)}), "
            f"whose sample order this version (format {CHECKPOINT_FORMAT}) does not reproduce; finish the run with "
            f"megamlm 0.1, or start a new run from its weights with --init-from {path}")
    if "progress" not in train_state.get("state", {}):
        raise ResumeError(f"cannot {flag} {path}: it holds weights only (an imported model, or a weights-only "
                          f"checkpoint), no training state; start a new run from its weights with --init-from {path}")
    return train_state, json.loads((path / CONFIG).read_text())


def history_difference(checkpoint: str | Path, cfg: Config) -> str | None:
    """For scripts (a study planner): where training with ``cfg`` from step 1 would differ from the history of
    ``checkpoint`` (a save folder or an iter_* folder) up to its step; None when ``--load`` continues it as the
    straight run of ``cfg`` (given the same seed, data, split and shape, which ``plan_start`` checks too)."""
    path = resolve_checkpoint(checkpoint)
    train_state, saved = _read(path, "branch from")
    return History.of_checkpoint(train_state, saved).first_difference(Segment.of_config(cfg), int(train_state["step"]))


def plan_start(cfg: Config, record: dict) -> Start:
    """How this launch starts, checked against its ``record`` (``training/run_record.py``); raises ResumeError."""
    launch = Segment.of_record(record)
    path = checkpoint_to_resume(cfg)
    if path is not None:
        return _plan_resume(cfg, record, launch, path)
    if cfg.checkpoint.continue_from:
        return _plan_continue(cfg, record, launch, resolve_checkpoint(cfg.checkpoint.continue_from))
    if cfg.checkpoint.init_from:
        path = resolve_checkpoint(cfg.checkpoint.init_from)
        return Start("init", History([launch]), path=path, lineage=[lineage_event("init", path, 0, 0, [])])
    return Start("fresh", History([launch]))


def _plan_resume(cfg: Config, record: dict, launch: Segment, path: Path) -> Start:
    train_state, saved = _read(path, "resume")
    step = int(train_state["step"])
    notes = _check_stream(cfg, record, saved, path) + _arithmetic_notes(saved, record)
    if cfg.training.train_iters < step:
        raise ResumeError(f"cannot resume {path}: it is at step {step}, past --train-iters "
                          f"{cfg.training.train_iters}; raise --train-iters, or branch from an earlier checkpoint")
    history = History.of_checkpoint(train_state, saved)
    kind = _compare_history(cfg, history, launch, step, path, notes)
    last, consumed = history.segment_at(step), consumed_samples(train_state)
    if last.global_batch_size != launch.global_batch_size:
        notes.append(f"--global-batch-size is {last.global_batch_size} in the checkpoint and "
                     f"{launch.global_batch_size} here: the same sample stream continues at sample {consumed} "
                     "with the new batch size")
    lineage = list(saved.get("lineage") or [])
    same_run = cfg.checkpoint.save and path.parent.resolve() == Path(cfg.checkpoint.save).resolve()
    if kind != "resume" or notes or not same_run:
        lineage.append(lineage_event(kind, path, step, consumed, notes))
    return Start(kind, history.continued_at(step, launch), path=path, train_state=train_state, lineage=lineage,
                 notes=notes)


def _check_stream(cfg: Config, record: dict, saved: dict, path: Path) -> list[str]:
    """Refuse a checkpoint of another sample stream, masks or shape; the note when --override-data accepts other
    data."""
    fresh = f"start a new run from its weights with --init-from {path}"
    fixed = _shape_differences(saved, record) + _differences(saved, record, _STREAM + _MASKING)
    if fixed:
        raise ResumeError(f"cannot resume {path}: {_describe(fixed)}; these fix the samples, the masks or the "
                          f"weights' shape, so relaunch with the checkpoint's values, or {fresh}")
    if saved.get("data_fingerprint") == record["data_fingerprint"]:
        return []
    what = (f"checkpoint {path} was trained on other data (fingerprint {saved.get('data_fingerprint')}, data "
            f"{saved.get('data_path')}) than this run (fingerprint {record['data_fingerprint']}, data "
            f"{record['data_path']})")
    if not cfg.checkpoint.override_data:
        raise ResumeError(f"{what}; resuming would continue its sample order on different data. Pass the same "
                          f"--data-path, or --override-data to continue on the new data deliberately, or {fresh}")
    return [f"{what}; continuing on the new data because of --override-data"]


def _arithmetic_notes(saved: dict, record: dict) -> list[str]:
    """The note when a CPU run continues a CPU checkpoint under other arithmetic (``_ARITHMETIC``); none for a
    checkpoint that did not record it."""
    on_cpu = _get(saved, ("arithmetic", "device")) == _get(record, ("arithmetic", "device")) == "cpu"
    differences = _differences(saved, record, _ARITHMETIC) if on_cpu else []
    if not differences:
        return []
    return [f"{_describe(differences)}: the run continues exactly, but its numbers can differ in the last bits from "
            "those of a run that never stopped (same torch, processor and thread count reproduce it bitwise)"]


def _compare_history(cfg: Config, history: History, launch: Segment, step: int, path: Path,
                     notes: list[str]) -> StartKind:
    """resume (the same schedule), branch (another schedule that agrees up to ``step``) or override; a
    ResumeError for a history that disagrees without --override-schedule."""
    last = history.segment_at(step)
    difference = history.first_difference(launch, step)
    if difference is None:
        if last.objective_schedule == launch.objective_schedule and last.lr_schedule == launch.lr_schedule:
            return "resume"
        notes.append(f"branching from {path}: its history of steps 1-{step} agrees with this launch's schedule, "
                     f"which differs after step {step} ({_schedule_changes(last, launch)})")
        return "branch"
    if not cfg.checkpoint.override_schedule:
        raise ResumeError(f"cannot resume {path}: its history disagrees with this launch's schedule: {difference}; "
                          "pass --override-schedule to continue with this launch's values, or relaunch with the "
                          "checkpoint's")
    if cfg.training.train_iters == step:
        raise ResumeError(f"cannot resume {path} at step {step} with --train-iters {step}: nothing would be "
                          "left to train; raise --train-iters")
    notes.append(f"--override-schedule: {difference}; this launch's values win from step {step + 1}")
    return "override"


def _schedule_changes(last: Segment, launch: Segment) -> str:
    changes = [describe_changes(last.objective_schedule, launch.objective_schedule, OBJECTIVE_FLAGS),
               describe_changes(last.lr_schedule, launch.lr_schedule, LR_FLAGS)]
    return "; ".join(dict.fromkeys(c for part in changes for c in part.split("; ") if c))  # --train-iters once


def _plan_continue(cfg: Config, record: dict, launch: Segment, path: Path) -> Start:
    train_state, saved = _read(path, "continue from")
    consumed = consumed_samples(train_state)
    where = f"--continue-from {path} continues its sample stream at sample {consumed}"
    fixed = _shape_differences(saved, record) + _differences(saved, record, _STREAM)
    if fixed:
        raise ResumeError(f"{where}, but {_describe(fixed).replace('the checkpoint', 'the parent')}: that position "
                          "means nothing in this run's stream; pass the parent's values, or --init-from "
                          f"{path} to start its weights on this data from sample 0")
    if saved.get("data_fingerprint") != record["data_fingerprint"]:
        raise ResumeError(f"{where}, but the parent was trained on other data (fingerprint "
                          f"{saved.get('data_fingerprint')}, data {saved.get('data_path')}) than this run (fingerprint "
                          f"{record['data_fingerprint']}, data {record['data_path']}); pass the parent's --data-path, "
                          f"or --init-from {path} to start its weights on this data from sample 0")
    lineage = list(saved.get("lineage") or []) + [lineage_event("continue", path, int(train_state["step"]),
                                                                consumed, [])]
    return Start("continue", History([launch]), path=path, train_state=train_state, lineage=lineage,
                 notes=[f"{where} with a fresh optimizer and LR schedule, from step 0"])
