"""Spawning gloo worlds on CPU, and the tiny shared setup the distributed tests compare layouts on."""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import SPLITTABLE, free_port, tiny_args
from megamlm.objectives import MaskingSpec, ObjectiveSchedule

# A tiny model whose heads (8), KV heads (4), layers (4), MLP width and vocabulary split by 2 and 4.
TINY = tiny_args(vocab_size=512, **SPLITTABLE)
SEQ = 32
SEED = 7


def _worker(rank: int, world_size: int, port: int, store_file: str, fn, args, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    # A file store: no rank hosts a TCP store server that the others would lose when it exits first (a rank
    # still tearing down its gloo threads then aborts with "terminate called without an active exception").
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()  # nobody tears down while a peer is still in a collective
    except BaseException:
        errors.put(f"rank {rank}:\n{traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def spawn(fn, world_size: int, *args) -> None:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; re-raise the first failure here."""
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="megamlm-store-") as store_dir:
        try:
            mp.start_processes(_worker, args=(world_size, free_port(), str(Path(store_dir) / "store"), fn, args,
                                              errors), nprocs=world_size, start_method="spawn")
        except Exception as err:
            detail = errors.get() if not errors.empty() else str(err)
            raise AssertionError(detail) from None


def schedule(objective: str, train_iters: int = 4, switch: float = 0.5) -> ObjectiveSchedule:
    masking = MaskingSpec(mask_ratio=0.4, replace_prob=1.0, random_prob=0.0, keep_prob=0.0, mask_id=3,
                          special_ids=(0, 1, 2, 3), random_vocab_size=TINY.vocab_size)
    return ObjectiveSchedule(objective, round(switch * train_iters), train_iters, masking, SEED)


def tokens_of(sample_ids) -> np.ndarray:
    """Deterministic token rows for global sample ids (a stand-in for the dataset)."""
    rows = [np.random.default_rng(1000 + k).integers(4, TINY.vocab_size - 40, SEQ) for k in sample_ids]
    return np.stack(rows).astype(np.int64)


def micro_batches(sched: ObjectiveSchedule, step: int, ids_per_micro: list[list[int]]):
    return [sched.make_batch(step, tokens_of(ids), ids) for ids in ids_per_micro]


def full_grads(named_params) -> dict[str, torch.Tensor]:
    """name -> full gradient (DTensors gathered), checkpoint-wrapper prefixes stripped."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in named_params:
        if p.grad is None:
            continue
        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        out[name.replace("_checkpoint_wrapped_module.", "")] = g.detach().clone()
    return out
