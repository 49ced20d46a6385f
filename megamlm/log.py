"""The one logging helper: rank 0 prints, the others stay quiet (also before the process group exists)."""

from __future__ import annotations

import logging
import sys
import time

from megamlm.launcher_env import rank_from_env


def rank() -> int:
    """Global rank: from the process group once it exists, before that from the launcher's environment.

    torch.distributed is looked up, not imported: a process that has not imported it has no process group, and
    commands that never need torch (``pretrain.py --help``) then start without it."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return rank_from_env()


def log(message: str) -> None:
    """Print ``message`` from global rank 0, flushed, with a UTC timestamp."""
    if rank() == 0:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"[{stamp}] {message}", file=sys.stdout, flush=True)


class _DropMessages:
    """A logging filter dropping the records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str):
        self.prefixes = prefixes

    def filter(self, record) -> bool:
        return not str(record.msg).startswith(self.prefixes)


KNOWN_IMPORT_NOISE = {
    # torchao (the fp8 and test extras) is imported by transformers' quantizers whenever it is installed; a torchao
    # wheel built for another Python or CUDA cannot load its optional C++ kernels (mxfp8, CUTLASS), which megamlm's
    # float8 training (torchao.float8, pure PyTorch) does not use.
    "torchao": ("Failed to load ",),
    # torchao registers its Enums as pytree constants, which torch >= 2.13 deprecates (a warning per Enum).
    "torch.utils._pytree": ("%s is an Enum subclass and is now natively supported",),
}
"""Logger -> the message prefixes ``quiet_imports`` drops: noise of third-party imports megamlm cannot avoid."""


def quiet_imports() -> None:
    """Drop ``KNOWN_IMPORT_NOISE`` (call once at the top of an entry point, before transformers is imported)."""
    for name, prefixes in KNOWN_IMPORT_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(*prefixes))
