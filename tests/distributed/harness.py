"""Spawning gloo worlds on CPU, and the tiny shared setup the distributed tests compare layouts on."""

from __future__ import annotations

import atexit
import os
import queue as queue_module
import resource
import sys
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


def _serve(rank: int, world_size: int, port: int, store_file: str, tasks, results) -> None:
    """One rank of a kept world: join the gloo group once, then run every task sent to this rank, each as if in a
    freshly spawned process (see ``_fresh``), until told to stop or a task fails."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    # A file store: no rank hosts a TCP store server that the others would lose when it exits first (a rank
    # still tearing down its gloo threads then aborts with "terminate called without an active exception").
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world_size)
    first_seed = torch.initial_seed()
    while (task := tasks.get()) is not None:
        fn, args, environ, cwd = task
        _fresh(environ, cwd, first_seed)
        try:
            fn(rank, world_size, *args)
            if not dist.is_initialized():
                raise AssertionError(f"{fn.__name__} left the process group: spawn() cannot run it")
            dist.barrier()  # nobody starts the next task while a peer is still in a collective of this one
        except BaseException:
            results.put((rank, f"rank {rank}:\n{traceback.format_exc()}", _cpu_seconds()))
            return  # a peer may be stuck in a collective: the parent ends this world
        results.put((rank, None, _cpu_seconds()))
    dist.barrier()  # nobody tears down while a peer is still in a collective
    dist.destroy_process_group()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _fresh(environ: dict, cwd: str, seed: int) -> None:
    """What a task may see of the tasks before it in this process, reset: the parent's environment and working
    folder now, torch's default seed as a new process has it, and no compiled graphs or compiler counters."""
    launcher = {k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    os.environ.clear()
    os.environ.update({**environ, **launcher})
    os.chdir(cwd)
    torch.manual_seed(seed)
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()


class _World:
    """``size`` gloo ranks started once and kept for the next ``spawn`` of that size: starting a world (a Python
    with torch and megamlm imported, per rank) costs more than most of the checks run in it on 2 CPU cores."""

    def __init__(self, size: int):
        ctx = mp.get_context("spawn")
        self.size = size
        self.store_dir = tempfile.TemporaryDirectory(prefix="megamlm-store-")
        self.tasks = [ctx.SimpleQueue() for _ in range(size)]
        self.results = ctx.Queue()
        self.cpu = [0.0] * size  # each rank's CPU seconds so far, as it last reported them
        store, port = str(Path(self.store_dir.name) / "store"), free_port()
        self.procs = [ctx.Process(target=_serve, args=(rank, size, port, store, self.tasks[rank], self.results),
                                  daemon=True) for rank in range(size)]
        for proc in self.procs:
            proc.start()

    def run(self, fn, args) -> str | None:
        """Run ``fn(rank, size, *args)`` on every rank; None, or the first failing rank's traceback (the world is
        then ended)."""
        for queue in self.tasks:
            queue.put((fn, args, dict(os.environ), os.getcwd()))
        done, failure = 0, None
        while done < self.size:
            try:
                rank, error, self.cpu[rank] = self.results.get(timeout=1.0 if failure is None else 10.0)
            except queue_module.Empty:
                if failure is not None:
                    break  # the other ranks wait in a collective for the failed one
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    failure = f"rank {self.procs.index(dead[0])} died (exit code {dead[0].exitcode})"
                    break
                continue
            done += 1
            failure = failure or error
        return failure

    def close(self, wait: bool) -> None:
        if wait:
            for queue in self.tasks:
                queue.put(None)
            for proc in self.procs:
                proc.join(timeout=30)
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.store_dir.cleanup()


_worlds: dict[int, _World] = {}


def spawn(fn, world_size: int, *args) -> None:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; re-raise the first failure here.

    The ranks are kept for the next call of the same size (one world at a time); a failure ends them."""
    for size in [s for s in _worlds if s != world_size]:
        _worlds.pop(size).close(wait=True)
    if world_size not in _worlds:
        _worlds[world_size] = _World(world_size)
    failure = _worlds[world_size].run(fn, args)
    if failure is not None:
        _worlds.pop(world_size).close(wait=False)
        raise AssertionError(failure)


def worker_cpu_seconds() -> float:
    """CPU seconds the ranks of the kept worlds have used (those of an ended world count as reaped children)."""
    return sum(sum(world.cpu) for world in _worlds.values())


def close_worlds() -> None:
    """End every kept world (at the end of the session)."""
    while _worlds:
        _worlds.popitem()[1].close(wait=True)


atexit.register(close_worlds)


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
