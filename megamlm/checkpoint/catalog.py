"""The checkpoints of a save folder: which exist, which are whole, which to keep.

A save folder holds ``iter_NNNNNNN/`` checkpoints (whole once their completion marker is written),
``iter_NNNNNNN.tmp/`` folders of saves in progress or interrupted, and the ``latest`` pointer file.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from megamlm.checkpoint.integrity import MARKER, read_marker, verify, verify_unmarked
from megamlm.checkpoint.leases import live_readers
from megamlm.checkpoint.untrusted import unsafe_content

LATEST = "latest_checkpointed_iteration.txt"
TRAIN_STATE = "train_state.json"
LEGACY_TRAIN_STATE = "train_state.pt"
"""Format 1 (megamlm 0.1): the train state as a torch pickle, rank 0's RNG only."""
CONFIG = "config.json"
REQUIRED = (".metadata", CONFIG)

_ITER = re.compile(r"^iter_(\d{7,})$")
_TMP = re.compile(r"^iter_(\d{7,})\.tmp$")


RNG_FILES = "rng_rank*.pt"


def rng_file(rank: int) -> str:
    """Each rank's RNG states (CPU and, where present, CUDA) live in their own file."""
    return f"rng_rank{rank:05d}.pt"


def iteration_dir(save_dir: str | Path, step: int) -> Path:
    return Path(save_dir) / f"iter_{step:07d}"


def step_of(folder: Path) -> int | None:
    match = _ITER.match(folder.name)
    return int(match.group(1)) if match else None


def list_checkpoints(save_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of every ``iter_NNNNNNN`` folder, newest first (whole or not)."""
    save_dir = Path(save_dir)
    if not save_dir.is_dir():
        return []
    found = [(step_of(p), p) for p in save_dir.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, reverse=True)


def problem(folder: Path, deep: bool = True, rank: int = 0, world_size: int = 1) -> str | None:
    """Why ``folder`` cannot be loaded, or None.

    A folder without a completion marker is accepted when its required files exist, it is not a ``.tmp``
    folder and its structure checks out (``verify_unmarked``): checkpoints written before markers existed were
    renamed into place only when complete, but may have been damaged since. With ``deep``, a whole checkpoint's
    pickled files are also read without running anything they name (``untrusted``): one naming code is refused.
    """
    if not (folder / MARKER).exists():
        missing = [name for name in REQUIRED if not (folder / name).exists()]
        if missing or folder.name.endswith(".tmp"):
            return (f"it is incomplete (missing {', '.join(missing or [MARKER])}); "
                    "it was probably interrupted while saving")
        reason = verify_unmarked(folder, readable=(CONFIG, TRAIN_STATE))
        if reason:
            return f"{reason} (a checkpoint without a completion marker, checked by its structure)"
    elif reason := verify(folder, deep=deep, rank=rank, world_size=world_size):
        return reason
    return unsafe_content(folder, rank, world_size) if deep else None


def is_pinned(folder: Path) -> bool:
    marker = read_marker(folder)
    return bool(marker and marker.get("pinned"))


def remove_folder(folder: Path) -> None:
    """Rename first, then delete: a crash mid-delete leaves a ``.trash`` folder, never a half checkpoint."""
    trash = folder.with_name(folder.name + f".trash{os.getpid()}")
    os.replace(folder, trash)
    shutil.rmtree(trash)


def retire_old_checkpoints(save_dir: str | Path, keep_last: int, newest_step: int, log=None) -> list[Path]:
    """Delete checkpoints older than the ``keep_last`` newest whole ones; returns what was deleted.

    Pinned checkpoints (the objective switch) are always kept, and nothing is deleted unless
    ``keep_last`` whole checkpoints remain, so the only good checkpoint is never removed. A checkpoint that
    a reader holds a lease on (``leases``) waits for a later save. Leftover ``.tmp`` folders of interrupted
    saves older than ``newest_step`` go too.
    """
    save_dir = Path(save_dir)
    whole = [(step, folder) for step, folder in list_checkpoints(save_dir) if problem(folder, deep=False) is None]
    deleted = []
    if len(whole) > keep_last:
        oldest_kept = whole[keep_last - 1][0]
        for step, folder in list_checkpoints(save_dir):
            if step < oldest_kept and not is_pinned(folder):
                if readers := live_readers(folder):
                    if log is not None:
                        log(f"kept {folder} for now: being read ({', '.join(readers)}); a later save retires it")
                    continue
                remove_folder(folder)
                deleted.append(folder)
    for folder in save_dir.iterdir():
        match = _TMP.match(folder.name)
        if match and int(match.group(1)) < newest_step and folder.is_dir():
            remove_folder(folder)
            deleted.append(folder)
    return deleted
