"""One run at a time per save folder: global rank 0 holds ``<save>/.megamlm.lock`` while the run writes there.

The lock is an advisory ``flock`` on the lock file, held for the whole run, so the kernel (or the shared file
system's lock service) releases it when the holder dies, however it dies. The file also names the holder (host,
pid, SLURM job, start time, command), and the holder touches it every ``HEARTBEAT_S`` seconds. A launch that
finds the folder locked stops before any work and names the holder. A file that names a holder although the
lock is free was left by a run that died (killed, node lost); it is stale, reported, and taken over. Which one it
is, where ``flock`` alone cannot tell (file systems without it, or with node-local locks such as some Lustre
mounts):

- an earlier attempt of this SLURM job (a requeue): stale;
- a holder on this host: stale when ``flock`` worked or its process is gone;
- a holder on another host: stale once its heartbeat is older than ``STALE_AFTER_S``.

Releasing empties the file instead of deleting it: a file deleted while another launch opens it would let two
runs hold locks on two different files.

Only global rank 0 touches the file; the other ranks learn the outcome with the same collective the
checkpointer uses (``ranks.first_error``), so every rank stops together.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from megamlm.checkpoint import ranks
from megamlm.checkpoint.checkpointer import CheckpointError, describe_failure
from megamlm.log import log

LOCK_FILE = ".megamlm.lock"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class SaveFolderInUse(CheckpointError):
    """Another run holds the save folder's lock."""


def _holder_line(holder: dict) -> str:
    job = f", SLURM job {holder['slurm_job_id']}" if holder.get("slurm_job_id") else ""
    return (f"pid {holder.get('pid')} on host {holder.get('host')}{job}, started {holder.get('started')}, "
            f"command {' '.join(holder.get('command') or [])!r}")


def _process_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


def _this_holder() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": sys.argv}


class SaveFolderLock:
    """The lock of one save folder, held by this process between ``acquire`` and ``release``."""

    def __init__(self, save_dir: str | Path):
        self.path = Path(save_dir) / LOCK_FILE
        self._fd: int | None = None
        self._stop_heartbeat = threading.Event()
        self.stale: dict | None = None
        """The holder named by a stale lock this process took over (for the log)."""

    def _read_holder(self) -> dict | None:
        assert self._fd is not None
        data = os.pread(self._fd, 1 << 16, 0)
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError:
            return {"host": "?", "pid": "?", "started": "?", "command": ["(unreadable lock file)"]}

    def acquire(self) -> None:
        """Take the lock or raise SaveFolderInUse naming the holder and what to do."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        locks_work = True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read_holder() or {}
            self._close()
            raise SaveFolderInUse(
                f"--save {self.path.parent} is in use by another run ({_holder_line(holder)}); wait for it to "
                "finish or stop it (a stop signal saves a checkpoint), or pass another --save") from None
        except OSError as err:
            if err.errno not in _NO_LOCKS:
                self._close()
                raise
            locks_work = False
        holder = self._read_holder()
        if holder is not None:
            alive = self._holder_alive(holder, locks_work)
            if alive:
                self._close()
                raise SaveFolderInUse(f"--save {self.path.parent} is in use by another run ({_holder_line(holder)}; "
                                      f"{alive}); wait for it to finish or stop it, or pass another --save")
        self.stale = holder
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(_this_holder(), indent=1).encode(), 0)
        os.fsync(self._fd)
        threading.Thread(target=self._heartbeat, name="megamlm-save-lock", daemon=True).start()

    def _holder_alive(self, holder: dict, locks_work: bool) -> str | None:
        """Why the holder named in a free lock file may still be running, or None when it is stale."""
        if holder.get("slurm_job_id") and holder.get("slurm_job_id") == os.environ.get("SLURM_JOB_ID"):
            return None  # an earlier attempt of this (requeued) job
        if holder.get("host") == socket.gethostname():
            if locks_work or not _process_alive(holder.get("pid")):
                return None
            return "its process is alive on this host"
        age = time.time() - self.path.stat().st_mtime
        if age >= STALE_AFTER_S:
            return None
        return (f"its heartbeat is {age:.0f} s old; a run that died is taken over once that reaches "
                f"{STALE_AFTER_S:.0f} s")

    def _heartbeat(self) -> None:
        while not self._stop_heartbeat.wait(HEARTBEAT_S):
            try:
                os.utime(self.path)
            except OSError:
                pass  # a missed beat only delays the takeover of a lock whose holder died

    def release(self) -> None:
        self._stop_heartbeat.set()
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass  # an unwritable file cannot name a holder that left; the lock itself goes with the descriptor
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


@contextmanager
def lock_save_folder(save_dir: str | Path | None) -> Iterator[None]:
    """Hold ``save_dir``'s lock for the block (on global rank 0; nothing without --save). Every rank raises
    SaveFolderInUse together when another run holds it."""
    if not save_dir:
        yield
        return
    lock = SaveFolderLock(save_dir) if ranks.rank() == 0 else None
    error = None
    if lock is not None:
        try:
            lock.acquire()
        except SaveFolderInUse as err:
            error = str(err)
        except OSError as err:
            error = (f"cannot lock --save {save_dir} ({describe_failure(err)}); pass a folder this run can write "
                     "to")
    if error := ranks.first_error(error):
        raise SaveFolderInUse(error.removeprefix("rank 0: "))
    if lock is not None and lock.stale is not None:
        log(f"warning: --save {save_dir} held a stale lock of {_holder_line(lock.stale)}: that run ended without "
            "releasing it (killed or its node lost); this run takes the folder over")
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
