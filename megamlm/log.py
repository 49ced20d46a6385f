"""The one logging helper: rank 0 prints, the others stay quiet (also before the process group exists)."""

from __future__ import annotations

import logging
import os
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
    """Print ``message`` from global rank 0, flushed, with a UTC timestamp. A standard output whose reader is gone
    loses the line, never the run (``write_line``)."""
    if rank() == 0:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        write_line(f"[{stamp}] {message}", sys.stdout)


def write_line(line: str, stream) -> None:
    """Write ``line`` to ``stream``, flushed. When the stream is a pipe whose reader has gone (``python pretrain.py
    ... | tee log`` after Ctrl-C, which reaches tee too), the line is lost and the stream is pointed at the null
    device, so that every later write, and the interpreter's last flush, succeed instead of raising BrokenPipeError
    into the run (which then could not save) or turning its exit status into 120."""
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        detach_broken_stream(stream)


def detach_broken_stream(stream) -> None:
    """Point ``stream``'s file descriptor at the null device (what is still buffered goes there too)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a captured stream): nothing to point
        pass


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
