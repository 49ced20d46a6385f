"""Checkpoints: torch.distributed.checkpoint shards + a small train-state file, committed crash-safely.

Layout of a save folder::

    latest_checkpointed_iteration.txt      "120"  (moved only after iter_0000120/ is whole)
    iter_0000120/
        .metadata, __*_*.distcp           model and optimizer, shard files per rank (DCP)
        train_state.json                  format, step, consumed samples, and every resumable object's state_dict
        rng_rankNNNNN.pt                  each rank's RNG states (Python, numpy, torch CPU and CUDA)
        config.json                       the run record: resolved config, model shape, versions, data fingerprint
        COMPLETE.json                     written last: size and sha256 of every file above

A save goes into ``iter_N.tmp/``: every rank writes its shards (DCP), hashes its share of the shard files and
leaves a completion file; rank 0 then writes its own files and the completion marker, renames the folder to
``iter_N/`` and moves the ``latest`` pointer. Loading picks the newest checkpoint whose files match its marker
and says which newer ones it skipped and why. A failed save (disk full, no permission) removes its ``.tmp``
folder, leaves every earlier checkpoint as it was, and raises ``CheckpointSaveError`` naming the cause.
``--init-from`` loads only the model shards.
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from megamlm.checkpoint import ranks
from megamlm.checkpoint.catalog import (
    CONFIG,
    LATEST,
    LEGACY_TRAIN_STATE,
    RNG_FILES,
    TRAIN_STATE,
    iteration_dir,
    list_checkpoints,
    problem,
    retire_old_checkpoints,
    rng_file,
    step_of,
)
from megamlm.checkpoint.integrity import (
    MARKER,
    fsync_dir,
    share_of,
    write_marker,
    write_rank_completion,
)
from megamlm.checkpoint.untrusted import VettedLoadPlanner, VettedReader, load_tensors
from megamlm.errors import CheckpointError
from megamlm.log import log

CHECKPOINT_FORMAT = 2
"""1: megamlm 0.1 (train_state.pt, one RNG state); 2: megamlm 0.2 (train_state.json, per-rank RNG files, the
sample stream of megamlm 0.2). Only the model weights of a format-1 checkpoint carry over (--init-from)."""


class CheckpointSaveError(CheckpointError):
    """A save that failed (disk full, permissions); earlier checkpoints are untouched."""


def rng_state() -> dict:
    """Every RNG's state as tensors, numbers and strings (a file that ``torch.load(weights_only=True)`` reads)."""
    numpy_state = np.random.get_state(legacy=False)
    key = torch.from_numpy(numpy_state["state"]["key"].astype(np.int64))
    numpy_state["state"] = {**numpy_state["state"], "key": key}
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):  # since megamlm 0.2's tensor-only RNG files; before, numpy's legacy tuple
        numpy_state = {**numpy_state, "state": {**numpy_state["state"],
                                                "key": numpy_state["state"]["key"].numpy().astype(np.uint32)}}
    np.random.set_state(numpy_state)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


NEARLY_FULL_BYTES = 64 << 20
"""A file system with less free space than this cannot take a checkpoint: a write error there is a full disk."""


def describe_failure(err: BaseException, folder: Path | None = None) -> str:
    """One line naming the cause, e.g. 'No space left on device (ENOSPC) at /ckpt/iter_0000008.tmp/__0_0.distcp'.

    torch's serializer reports a failed write as a RuntimeError ("unexpected pos ..."); when ``folder``'s file
    system is (nearly) full at that moment, the cause is named as the full disk it is.
    """
    if isinstance(err, CheckpointException) and err.failures:
        err = next(iter(err.failures.values()))[0]
    if isinstance(err, OSError) and err.errno:
        where = f" at {err.filename}" if err.filename else ""
        return f"{os.strerror(err.errno)} ({errno.errorcode.get(err.errno, err.errno)}){where}"
    free = _free_bytes(folder) if folder is not None else None
    if free is not None and free < NEARLY_FULL_BYTES:
        return (f"{os.strerror(errno.ENOSPC)} (ENOSPC): {free:,} bytes free on the file system of {folder} "
                f"({type(err).__name__}: {err})")
    return f"{type(err).__name__}: {err}"


def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def newest_whole(save_dir: str | Path) -> Path | None:
    """The newest checkpoint of ``save_dir`` whose files have the sizes its marker records (no hashing)."""
    for _, folder in list_checkpoints(save_dir):
        if problem(folder, deep=False) is None:
            return folder
    return None


def _write_latest(save_dir: Path, step: int) -> None:
    tmp = save_dir / f"{LATEST}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, save_dir / LATEST)
    fsync_dir(save_dir)


def _serialized(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _write_bytes(path: Path, data: bytes) -> None:
    """A plain write, so that a full disk surfaces as OSError(ENOSPC) and not as a serializer error."""
    with open(path, "wb") as f:
        f.write(data)


def save_checkpoint(save_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    train_state: dict, config: dict, *, keep_last: int | None = None,
                    pinned: str | None = None) -> Path:
    """Write the checkpoint of ``step`` on every rank; returns its final folder.

    ``keep_last``: afterwards delete all but the newest N whole checkpoints (never a pinned one).
    ``pinned``: why this checkpoint must survive retention (e.g. "objective switch").
    """
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return save_state_checkpoint(save_dir, step, {"model": model_sd, "optim": optim_sd}, train_state, config,
                                 keep_last=keep_last, pinned=pinned)


def save_state_checkpoint(save_dir: str | Path, step: int, state: dict, train_state: dict, config: dict, *,
                          keep_last: int | None = None, pinned: str | None = None) -> Path:
    """The commit protocol for any DCP state dict (``{"model": ...}`` alone makes a weights-only checkpoint)."""
    save_dir = Path(save_dir)
    final = iteration_dir(save_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    rank, world = ranks.rank(), ranks.world_size()

    def fail(cause: str) -> CheckpointSaveError:
        """Every rank calls this together (they share ``cause``): clean up, then all raise."""
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        ranks.barrier()
        previous = newest_whole(save_dir)
        kept = f"the previous checkpoint {previous} is untouched" if previous else "no earlier checkpoint exists"
        return CheckpointSaveError(
            f"could not save the checkpoint of step {step} into {save_dir}: {cause}; {kept}. Free disk space or "
            "fix the folder's permissions (or pass another --save), then relaunch the same command to resume")

    error = None
    if rank == 0:
        try:
            save_dir.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)  # leftovers of a save that crashed
            tmp.mkdir()
        except OSError as err:
            error = describe_failure(err)
    if error := ranks.first_error(error):
        raise fail(error)

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            metadata = dcp.save(state, checkpoint_id=str(tmp))
        _write_bytes(tmp / rng_file(rank), _serialized(rng_state()))
        shard_files = sorted({info.relative_path for info in metadata.storage_data.values()})
        write_rank_completion(tmp, rank, [*share_of(shard_files, rank, world), rng_file(rank)])
    except (OSError, RuntimeError, CheckpointException) as err:
        error = describe_failure(err, tmp)
    if error := ranks.first_error(error):
        raise fail(error)

    if rank == 0:
        try:
            (tmp / TRAIN_STATE).write_text(json.dumps({**train_state, "format": CHECKPOINT_FORMAT, "step": step},
                                                      indent=1, sort_keys=True))
            (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
            write_marker(tmp, step, world, [".metadata", TRAIN_STATE, CONFIG], {"pinned": pinned})
            _publish(tmp, final, save_dir, step)
        except OSError as err:
            error = describe_failure(err)
    if error := ranks.first_error(error):
        raise fail(error)

    if rank == 0 and keep_last:
        _retire(save_dir, keep_last, step)
    ranks.barrier()
    return final


def _publish(tmp: Path, final: Path, save_dir: Path, step: int) -> None:
    """Rank 0: the whole checkpoint in ``tmp`` becomes ``final`` (a step saved again is swapped in only now that the
    new one is whole), then the folder is synced and the latest pointer names it."""
    if final.exists():
        old = final.with_name(final.name + f".trash{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    fsync_dir(save_dir)
    _write_latest(save_dir, step)


def _retire(save_dir: Path, keep_last: int, step: int) -> None:
    """Rank 0: --keep-last's pruning; a checkpoint that cannot be deleted costs disk space, not the run."""
    try:
        for folder in retire_old_checkpoints(save_dir, keep_last, step, log=log):
            log(f"deleted old checkpoint {folder} (--keep-last {keep_last})")
    except OSError as err:
        log(f"warning: could not delete old checkpoints in {save_dir}: {describe_failure(err)}")


def _agreed_problem(folder: Path, deep: bool) -> str | None:
    return ranks.first_error(problem(folder, deep=deep, rank=ranks.rank(), world_size=ranks.world_size()))


def find_checkpoint(save_dir: str | Path, deep: bool = True) -> Path | None:
    """The newest loadable checkpoint of a save folder, or None; every newer one skipped is logged with why."""
    for _, folder in list_checkpoints(save_dir):
        reason = _agreed_problem(folder, deep)
        if reason is None:
            return folder
        log(f"warning: skipping checkpoint {folder}: {reason}")
    return None


def resolve_checkpoint(path: str | Path, deep: bool = True) -> Path:
    """A save folder (its newest loadable checkpoint) or an iter_N folder (checked) -> a loadable iter_N folder."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint path {path} does not exist; pass the --save folder of an earlier run")
    if step_of(path) is not None or (path / ".metadata").exists() or (path / MARKER).exists():
        reason = _agreed_problem(path, deep)
        if reason is not None:
            raise CheckpointError(f"checkpoint {path} cannot be loaded: {reason}; pass its save folder "
                                  f"{path.parent} to load the newest whole checkpoint, or an earlier iter_* folder")
        return path
    candidates = list_checkpoints(path)
    if not candidates:
        raise CheckpointError(f"{path} holds no checkpoint (no iter_* checkpoint folders); "
                              "pass a --save folder of an earlier run or one of its iter_NNNNNNN folders")
    found = find_checkpoint(path, deep)
    if found is None:
        raise CheckpointError(f"none of the {len(candidates)} checkpoints in {path} can be loaded (see the warnings "
                              "above); they were interrupted while saving or damaged since: start a fresh run")
    if found != candidates[0][1]:
        log(f"using checkpoint {found}, the newest whole one in {path}")
    return found


def read_checkpoint_config(path: str | Path) -> dict:
    return json.loads((resolve_checkpoint(path) / CONFIG).read_text())


def read_train_state(folder: Path) -> dict:
    """The train state of a checkpoint folder (``format`` 1 for megamlm 0.1's pickled one)."""
    folder = Path(folder)
    if (folder / TRAIN_STATE).is_file():
        return json.loads((folder / TRAIN_STATE).read_text())
    if (folder / LEGACY_TRAIN_STATE).is_file():
        return {**load_tensors(folder / LEGACY_TRAIN_STATE), "format": 1}
    raise CheckpointError(f"checkpoint {folder} has no {TRAIN_STATE}; it cannot be resumed (its weights may still "
                          f"load with --init-from {folder})")


def _dcp_load(state: dict, ckpt: Path) -> None:
    """``dcp.load`` of ``state`` from ``ckpt``, reading nothing that could run code (``untrusted``); a refusal is
    raised as the CheckpointError it is, not wrapped in DCP's CheckpointException."""
    reader, planner = VettedReader(str(ckpt)), VettedLoadPlanner(ckpt)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        try:
            dcp.load(state, checkpoint_id=str(ckpt), storage_reader=reader, planner=planner)
        except (Exception, CheckpointException):
            if refused := reader.refused or planner.refused:
                raise refused from None
            raise


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load model and optimizer (resharded to this layout) and this rank's RNG states, in place.

    A world of another size takes the RNG file of rank ``rank % saved ranks``.
    """
    ckpt = Path(path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    own_groups = [list(group["params"]) for group in optim_sd.get("param_groups", [])]
    state = {"model": model_sd, "optim": optim_sd}
    _dcp_load(state, ckpt)
    _keep_own_parameters(state["optim"], own_groups)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    saved_ranks = len(list(ckpt.glob(RNG_FILES)))
    if saved_ranks:
        set_rng_state(load_tensors(ckpt / rng_file(ranks.rank() % saved_ranks)))


def _keep_own_parameters(optim_state: dict, own_groups: list[list[str]]) -> None:
    """Each loaded parameter group names this rank's parameters, with the checkpoint's hyperparameters. DCP writes
    one ``param_groups`` value for all ranks (one rank's), so under pipeline parallelism, where each stage's
    optimizer holds its own stage's parameters, the other stages read back groups that name parameters they do not
    have, and torch's ``set_state_dict`` then drops the groups' hyperparameters (the first step failed with
    KeyError: 'betas'). Every rank builds the same groups (weight decay and none, the same settings), so the group
    in the same place is this rank's; the state tensors are keyed by parameter name and load as they are."""
    groups = optim_state.get("param_groups") or []
    if len(groups) != len(own_groups):
        raise CheckpointError(f"the checkpoint's optimizer has {len(groups)} parameter groups and this run's "
                              f"{len(own_groups)}: it was saved by another optimizer setup; resume with the "
                              f"checkpoint's flags, or start from its weights with --init-from")
    for group, own in zip(groups, own_groups):
        group["params"] = own


def load_model_weights(path: str | Path, model: torch.nn.Module, verify: bool = True) -> Path:
    """Weights only (continued pretraining): no optimizer, schedule or data position.

    ``verify=False``: ``path`` is a checkpoint folder that ``resolve_checkpoint`` has just checked (hashing a large
    checkpoint twice costs minutes)."""
    ckpt = resolve_checkpoint(path) if verify else Path(path)
    model_sd = get_model_state_dict(model)
    state = {"model": model_sd}
    _dcp_load(state, ckpt)
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=True))
    return ckpt
