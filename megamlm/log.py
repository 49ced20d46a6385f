"""The one logging helper: rank 0 prints, the others stay quiet."""

from __future__ import annotations

import sys
import time

import torch.distributed as dist


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def log(message: str) -> None:
    """Print ``message`` from global rank 0, flushed, with a UTC timestamp."""
    if rank() == 0:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"[{stamp}] {message}", file=sys.stdout, flush=True)
