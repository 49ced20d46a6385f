"""The saved run a launch starts from, found and read once: which checkpoint the launch's flags name, and what it
holds (train state, run record, history, lineage).

A relaunch continues from the newest whole checkpoint of its ``--save`` folder (incomplete or damaged ones are
skipped with a warning), else from ``--load``; without either, ``--continue-from`` and ``--init-from`` name a
checkpoint whose weights start a new run. ``find_saved_run`` follows that order and reads the checkpoint it picks
(verified by ``resolve_checkpoint``); ``training/resume.py`` compares it with the launch. ``--init-from`` takes
weights only, so of its checkpoint only the folder is kept (it may hold no train state).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from megamlm.checkpoint.catalog import CONFIG, list_checkpoints
from megamlm.checkpoint.checkpointer import find_checkpoint, read_train_state, resolve_checkpoint
from megamlm.config import CheckpointConfig
from megamlm.errors import CheckpointError
from megamlm.log import log


@dataclass(frozen=True)
class SavedRun:
    """One checkpoint as a launch reads it: the flag that named it, its train state and its run record, and what a
    start reads of them."""

    path: Path
    flag: str
    """The flag that named it: ``--save`` (a relaunch), ``--load``, ``--continue-from`` or ``--init-from``."""
    train_state: dict | None = None
    """``train_state.json`` (``format`` 1 for megamlm 0.1's); None for ``--init-from`` (weights only)."""
    record: dict = field(default_factory=dict)
    """``config.json``: the run record of the launch that saved it (``training/run_record.py``)."""
    format: int = 1
    step: int = 0
    progress: dict | None = None
    """``{"step", "consumed_samples"}`` it was saved at; None for weights only (an imported model, or a
    weights-only checkpoint, holds no training state)."""
    consumed_samples: int = 0
    lineage: list[dict] = field(default_factory=list)
    """The runs it came from (``training/lineage.py``), oldest first."""

    @classmethod
    def of(cls, path: Path, flag: str, train_state: dict, record: dict) -> "SavedRun":
        """A checkpoint's train state and run record, and what a start reads of them."""
        progress = train_state.get("state", {}).get("progress")
        progress = None if progress is None else {key: int(value) for key, value in progress.items()}
        return cls(path, flag, train_state, record, int(train_state.get("format", 1)),
                   int(train_state.get("step", 0)), progress, progress["consumed_samples"] if progress else 0,
                   list(record.get("lineage") or []))


def read_saved_run(path: Path, flag: str) -> SavedRun:
    """The train state and run record of the checkpoint folder ``path`` (already resolved and verified)."""
    return SavedRun.of(path, flag, read_train_state(path), json.loads((path / CONFIG).read_text()))


def find_saved_run(c: CheckpointConfig) -> SavedRun | None:
    """The checkpoint this launch starts from, read; None for a start from scratch."""
    path = checkpoint_to_resume(c)
    if path is not None:
        return read_saved_run(path, "--save" if c.save and path.parent == Path(c.save) else "--load")
    if c.continue_from:
        return read_saved_run(resolve_checkpoint(c.continue_from), "--continue-from")
    if c.init_from:
        return SavedRun(resolve_checkpoint(c.init_from), "--init-from")
    return None


def checkpoint_to_resume(c: CheckpointConfig) -> Path | None:
    """The newest whole checkpoint of ``--save`` (a relaunch), else ``--load``'s, else None."""
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
