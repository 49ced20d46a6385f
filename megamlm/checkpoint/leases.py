"""Read leases: a reader of a checkpoint folder (an export, another run's --init-from) marks it while it reads, and
``--keep-last`` retirement leaves a marked folder for a later save.

A lease is a file ``.reader.<host>.<pid>.<n>`` inside the checkpoint folder on which the reader holds an
advisory ``flock`` while it reads; a reader that dies releases the lock with its process, so its leftover file
holds nothing back. (Where the file system has no ``flock``, a lease counts while it is younger than
``LEASE_LIFETIME_S``.) Retirement checks for leases and then renames the folder away: a reader whose lease
appears in between finds the folder gone and reads the newest checkpoint instead (``reading.read_newest``).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LEASE_PREFIX = ".reader."
LEASE_LIFETIME_S = 600.0
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_counter = itertools.count()


@contextmanager
def read_lease(folder: Path) -> Iterator[None]:
    """Hold a lease on ``folder`` for the block; FileNotFoundError when the folder is gone (retired)."""
    path = Path(folder) / f"{LEASE_PREFIX}{socket.gethostname()}.{os.getpid()}.{next(_counter)}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except (PermissionError, OSError) as err:
        if isinstance(err, FileNotFoundError) or err.errno == errno.ENOENT:
            raise
        yield  # a folder this reader cannot write to (read-only copy): read without a lease
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in _NO_LOCKS:
                raise
        yield
    finally:
        os.close(fd)
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # the folder went away meanwhile


def live_readers(folder: Path) -> list[str]:
    """The leases of ``folder`` whose readers are still reading (names of the lease files)."""
    live = []
    for path in Path(folder).glob(f"{LEASE_PREFIX}*"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # released meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live.append(path.name)
        except OSError as err:
            if err.errno not in _NO_LOCKS:
                raise
            if time.time() - os.fstat(fd).st_mtime < LEASE_LIFETIME_S:
                live.append(path.name)
        finally:
            os.close(fd)
    return live
