"""The few collective helpers checkpointing needs, usable with or without torch.distributed."""

from __future__ import annotations

import torch.distributed as dist


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if distributed() else 1


def barrier() -> None:
    if distributed():
        dist.barrier()


def first_error(error: str | None) -> str | None:
    """Every rank learns the first error any rank hit (so all ranks fail together); also a barrier."""
    if not distributed():
        return error
    errors: list[str | None] = [None] * world_size()
    dist.all_gather_object(errors, error)
    for r, e in enumerate(errors):
        if e is not None:
            return e if world_size() == 1 else f"rank {r}: {e}"
    return None
