"""Decisions every rank must take together (skip a step, stop the run) come from one tiny all-reduce."""

from __future__ import annotations

import torch
import torch.distributed as dist

from megamlm.parallel.launch import host_collective_device


def any_rank(flags: list[bool], group=None) -> list[bool]:
    """Element-wise OR of ``flags`` over the ranks of ``group`` (the whole job when None); local without
    torch.distributed."""
    if not (dist.is_available() and dist.is_initialized()):
        return list(flags)
    tensor = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32, device=host_collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return [bool(v) for v in tensor.tolist()]
