"""What a run says before its first step, so a long first step is never silent: the estimated memory per device
(the dry-run estimator, with a warning when it exceeds the device) and when step 1 starts (and compiles)."""

from __future__ import annotations

import os

import torch

from megamlm.config import Config
from megamlm.model.config import ModelArgs
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.dry_run import GIB, rank_estimates


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory one rank may use: the GPU's, or on CPU the host's shared by the ranks of this node."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    ranks_here = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
    return host // max(1, int(ranks_here))


def memory_note(cfg: Config, dims: ParallelDims, args: ModelArgs, device: torch.device) -> str:
    """One line with the estimated peak memory per device; a warning when it exceeds what the device has."""
    rows = rank_estimates(cfg, dims, args)
    worst = max(rows, key=lambda row: row["total_gib"])
    where = f" (pipeline rank {worst['pp_rank']})" if dims.pp > 1 else ""
    estimate = (f"estimated memory per device: {worst['total_gib']:.2f} GiB{where} = weights, gradients and AdamW "
                f"{worst['state_gib']:.2f} + activations {worst['activations_gib']:.2f} + LM head "
                f"{worst['head_gib']:.2f} (an estimate, as --dry-run prints)")
    available = device_memory_bytes(device)
    if available is None or worst["total_gib"] * GIB <= available:
        return estimate
    what = "the GPU" if device.type == "cuda" else "this rank's share of the host memory"
    return (f"warning: {estimate} exceeds the {available / GIB:.2f} GiB of {what}: the run may run out of memory; "
            "lower --micro-batch-size, add --recompute, or spread the model wider (--tp, --pp, more FSDP ranks)")


def first_step_note(compile_mode: str, step: int, train_iters: int) -> str:
    """``compile_mode``: the resolved ``--compile`` mode (``ParallelModel.compile_mode``)."""
    note = f"step {step}/{train_iters} starting"
    if compile_mode != "none":
        what = "every block" if compile_mode == "blocks" else "the model"
        return note + f": torch.compile compiles {what} during this first step, which can take minutes"
    return note + " (the first step also warms up the kernels and allocator)"
