"""Issue 31, item 11: a real full disk (a 1 MB tmpfs mounted by the test, filled with a file), already full at the
launch and filling during the run, under --save, metrics.jsonl and --tensorboard-dir: each ends in one line naming
the problem (exit 2), never a traceback. The other full-disk tests simulate ENOSPC with a patched write; these
fill a file system for real. Mounting needs root (this machine and CI run as root): refused, they skip saying so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest
from forked_python import run_python
from helpers import TINY_BATCH, TINY_SHAPE

REPO = Path(__file__).resolve().parents[2]
SMALL = [*TINY_SHAPE, *TINY_BATCH, "--log-interval", "1"]
PAGE = 4096


@contextlib.contextmanager
def small_disk(folder: Path, free: int = 0):
    """A 1 MB tmpfs at ``folder``, filled up to ``free`` bytes left (whole pages: tmpfs counts pages); unmounted
    after."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'}): needs root")
    try:
        stat = os.statvfs(folder)
        fill = stat.f_bavail * stat.f_frsize - free
        with open(folder / "filler", "wb") as f:
            f.write(b"\0" * fill)
        assert os.statvfs(folder).f_bavail * PAGE == free
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def pretrain(*flags, cache_dir: str) -> subprocess.CompletedProcess:
    """pretrain.py in a process of its own, as a user runs it (tracebacks of any thread land in its stderr),
    forked from one that imported torch and megamlm (tests/forked_python.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MEGAMLM_CACHE": cache_dir}
    env.pop("MEGAMLM_PRETRAIN_ARGS", None)
    return run_python([REPO / "pretrain.py", *SMALL, *flags], cwd=REPO, env=env, timeout=900)


def one_line(done: subprocess.CompletedProcess, *expected: str) -> str:
    """The run ended with exit 2 and one error line holding ``expected``, no traceback."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_a_full_disk_under_save_at_the_launch(tmp_path, cache_dir):
    with small_disk(tmp_path / "disk") as disk:
        done = pretrain("--train-iters", "2", "--save", disk / "run", cache_dir=cache_dir)
        one_line(done, f"--save {disk / 'run'}", "No space left on device (ENOSPC)")


def test_a_full_disk_under_tensorboard_dir_at_the_launch(tmp_path, cache_dir):
    with small_disk(tmp_path / "disk") as disk:
        done = pretrain("--train-iters", "2", "--save", tmp_path / "run", "--tensorboard-dir", disk / "tb",
                        cache_dir=cache_dir)
        one_line(done, f"--tensorboard-dir {disk / 'tb'}", "No space left on device (ENOSPC)")
        assert not (tmp_path / "run").exists()  # refused before any work


def test_the_disk_under_save_fills_at_the_checkpoint(tmp_path, cache_dir):
    """Room for the run's record and metrics, not for the checkpoint of step 2."""
    with small_disk(tmp_path / "disk", free=64 * PAGE) as disk:
        done = pretrain("--train-iters", "2", "--save", disk / "run", cache_dir=cache_dir)
        one_line(done, "could not save the checkpoint of step 2", "No space left on device (ENOSPC)")


def test_the_disk_under_metrics_jsonl_fills_during_the_run(tmp_path, cache_dir):
    """A few pages: the run starts, metrics.jsonl grows a line a step until the disk is full."""
    with small_disk(tmp_path / "disk", free=3 * PAGE) as disk:
        done = pretrain("--train-iters", "400", "--save", disk / "run", cache_dir=cache_dir)
        one_line(done, "writing metrics.jsonl failed: No space left on device (ENOSPC)",
                 str(disk / "run" / "metrics.jsonl"))


def test_the_disk_under_tensorboard_dir_fills_during_the_run(tmp_path, cache_dir):
    with small_disk(tmp_path / "disk", free=2 * PAGE) as disk:
        done = pretrain("--train-iters", "400", "--save", tmp_path / "run", "--tensorboard-dir", disk / "tb",
                        cache_dir=cache_dir)
        one_line(done, "writing the TensorBoard events failed: No space left on device (ENOSPC)", "saved checkpoint")
