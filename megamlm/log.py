"""The one logging helper: rank 0 prints, the others stay quiet (also before the process group exists)."""

from __future__ import annotations

import sys
import time

import torch.distributed as dist

from megamlm.launcher_env import rank_from_env


def rank() -> int:
    """Global rank: from the process group once it exists, before that from the launcher's environment."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return rank_from_env()


def log(message: str) -> None:
    """Print ``message`` from global rank 0, flushed, with a UTC timestamp."""
    if rank() == 0:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"[{stamp}] {message}", file=sys.stdout, flush=True)
