"""Checkpoints: torch.distributed.checkpoint shards + a small train-state file, committed atomically.

Layout of a save folder::

    latest_checkpointed_iteration.txt      "120"  (moved only after iter_0000120/ is complete)
    iter_0000120/
        .metadata, __*_*.distcp           model and optimizer, one shard file per rank (DCP)
        train_state.pt                    step, consumed samples, LR schedule, ObjectiveSchedule, sampler, RNG
        config.json                       the resolved run config and model shape

A checkpoint is written into ``iter_N.tmp/`` and renamed to ``iter_N/`` once every part is on disk, so a
crash mid-save never leaves a folder that looks complete. ``--init-from`` loads only the model shards.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

LATEST = "latest_checkpointed_iteration.txt"
TRAIN_STATE = "train_state.pt"
CONFIG = "config.json"
REQUIRED = (".metadata", TRAIN_STATE, CONFIG)


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete or does not fit this run; the message names the fix."""


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _is_rank0() -> bool:
    return not _distributed() or dist.get_rank() == 0


def iteration_dir(save_dir: str | Path, step: int) -> Path:
    return Path(save_dir) / f"iter_{step:07d}"


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(save_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    train_state: dict, config: dict) -> Path:
    """Write the checkpoint of ``step`` on every rank; returns its final folder."""
    final = iteration_dir(save_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if _is_rank0():
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)  # leftovers of a save that crashed
        tmp.mkdir()
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    if _is_rank0():
        torch.save({**train_state, "step": step, "rng": rng_state()}, tmp / TRAIN_STATE)
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
        if final.exists():
            old = final.with_name(final.name + ".old")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _write_atomic(Path(save_dir) / LATEST, str(step))
    _barrier()
    return final


def resolve_checkpoint(path: str | Path) -> Path:
    """A save folder (follows its latest pointer) or an iter_N folder -> the complete iter_N folder."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint path {path} does not exist; pass the --save folder of an earlier run")
    if (path / LATEST).is_file():
        step = int((path / LATEST).read_text().strip())
        path = iteration_dir(path, step)
    elif not (path / ".metadata").exists() and not path.name.startswith("iter_"):
        raise CheckpointError(f"{path} holds no checkpoint (no {LATEST} and no iter_* checkpoint files); "
                              "pass a --save folder of an earlier run or one of its iter_NNNNNNN folders")
    missing = [name for name in REQUIRED if not (path / name).exists()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete (missing {', '.join(missing)}); "
                              "it was probably interrupted while saving: load an earlier iter_* folder")
    return path


def read_checkpoint_config(path: str | Path) -> dict:
    return json.loads((resolve_checkpoint(path) / CONFIG).read_text())


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Load model, optimizer and RNG in place; returns the train state (step, schedules, sampler)."""
    ckpt = resolve_checkpoint(path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.load(state, checkpoint_id=str(ckpt))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    train_state = torch.load(ckpt / TRAIN_STATE, weights_only=False)
    set_rng_state(train_state["rng"])
    return train_state


def load_model_weights(path: str | Path, model: torch.nn.Module) -> Path:
    """Weights only (continued pretraining): no optimizer, schedule or data position."""
    ckpt = resolve_checkpoint(path)
    model_sd = get_model_state_dict(model)
    state = {"model": model_sd}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.load(state, checkpoint_id=str(ckpt))
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=True))
    return ckpt
