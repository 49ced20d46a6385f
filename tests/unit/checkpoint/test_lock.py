"""The save-folder lock with real processes: held, stale after the holder is killed, released; the fallbacks."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megamlm.checkpoint import lock as lock_module
from megamlm.checkpoint.lock import LOCK_FILE, STALE_AFTER_S, SaveFolderInUse, SaveFolderLock, lock_save_folder

REPO = Path(__file__).resolve().parents[3]
HOLD = """
import sys, time
from megamlm.checkpoint.lock import SaveFolderLock
lock = SaveFolderLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def holder_process(save_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(save_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_lock_refuses_naming_the_holder_and_a_killed_holder_leaves_a_stale_lock_that_is_taken_over(tmp_path):
    proc = holder_process(tmp_path)
    try:
        with pytest.raises(SaveFolderInUse, match=rf"is in use by another run \(pid {proc.pid} on host "):
            SaveFolderLock(tmp_path).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = SaveFolderLock(tmp_path)
    lock.acquire()  # the kernel released the dead holder's flock; its name is still in the file
    assert lock.stale["pid"] == proc.pid
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    assert (tmp_path / LOCK_FILE).read_text() == ""
    again = SaveFolderLock(tmp_path)
    again.acquire()
    assert again.stale is None  # a released lock is not stale
    again.release()


def test_the_context_manager_reports_a_stale_lock_and_releases_at_the_end(tmp_path, capsys):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": 999999999,
                                                  "started": "then", "command": ["pretrain.py"]}))
    with lock_save_folder(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "held a stale lock of pid 999999999" in capsys.readouterr().out
    assert (tmp_path / LOCK_FILE).read_text() == ""


def test_no_save_folder_no_lock(tmp_path):
    with lock_save_folder(None):
        pass
    assert not list(tmp_path.iterdir())


def test_an_unwritable_save_folder_is_one_clear_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("not a folder")
    with pytest.raises(SaveFolderInUse, match="cannot lock --save .*; pass a folder this run can write to"):
        with lock_save_folder(target):
            pass


@pytest.fixture
def no_flock(monkeypatch):
    def unsupported(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(lock_module.fcntl, "flock", unsupported)


def write_holder(folder: Path, **holder) -> None:
    (folder / LOCK_FILE).write_text(json.dumps({"started": "then", "command": ["pretrain.py"], **holder}))


def test_without_flock_a_live_process_on_this_host_holds_and_a_dead_one_is_stale(tmp_path, no_flock):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        write_holder(tmp_path, host=socket.gethostname(), pid=proc.pid)
        with pytest.raises(SaveFolderInUse, match="its process is alive on this host"):
            SaveFolderLock(tmp_path).acquire()
    finally:
        proc.kill()
        proc.wait()
    lock = SaveFolderLock(tmp_path)
    lock.acquire()
    assert lock.stale["pid"] == proc.pid
    lock.release()


def test_without_flock_another_host_holds_while_its_heartbeat_is_fresh(tmp_path, no_flock):
    write_holder(tmp_path, host="other-node", pid=1)
    with pytest.raises(SaveFolderInUse, match="its heartbeat is .* s old"):
        SaveFolderLock(tmp_path).acquire()
    old = time.time() - STALE_AFTER_S - 1
    os.utime(tmp_path / LOCK_FILE, (old, old))
    lock = SaveFolderLock(tmp_path)
    lock.acquire()
    assert lock.stale["host"] == "other-node"
    lock.release()


def test_an_earlier_attempt_of_the_same_slurm_job_is_stale(tmp_path, no_flock, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    write_holder(tmp_path, host="other-node", pid=1, slurm_job_id="4242")
    lock = SaveFolderLock(tmp_path)
    lock.acquire()
    assert lock.stale["slurm_job_id"] == "4242"
    lock.release()


def test_the_holder_keeps_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_module, "HEARTBEAT_S", 0.05)
    lock = SaveFolderLock(tmp_path)
    lock.acquire()
    old = time.time() - 1000
    os.utime(tmp_path / LOCK_FILE, (old, old))
    deadline = time.monotonic() + 120  # a guard only: the wait ends at the first heartbeat, however late it comes
    while (tmp_path / LOCK_FILE).stat().st_mtime == old:
        assert time.monotonic() < deadline, "the holder never touched its lock file"
        time.sleep(0.01)
    assert time.time() - (tmp_path / LOCK_FILE).stat().st_mtime < 100
    lock.release()
