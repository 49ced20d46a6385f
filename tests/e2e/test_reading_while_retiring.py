"""Exporting from a save folder while its run retires checkpoints (--keep-last 1, a save every step): every
export succeeds; a slow reader's lease keeps its checkpoint from being retired under it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import TINY_SHAPE

from megamlm.hf import export as export_module
from megamlm.hf.export import export_checkpoint

REPO = Path(__file__).resolve().parents[2]
TRAIN = [*TINY_SHAPE, "--global-batch-size", "2", "--micro-batch-size", "2", "--train-iters", "100000",
         "--save-interval", "1", "--keep-last", "1", "--log-interval", "50"]


@pytest.fixture
def training_run(tmp_path, cache_dir):
    save = tmp_path / "run"
    env = {**os.environ, "MEGAMLM_CACHE": cache_dir, "OMP_NUM_THREADS": "1"}
    # The log goes to a file: a pipe nobody reads until the end would fill (a line per save) and stall the run.
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(REPO / "pretrain.py"), *TRAIN, "--save", str(save)], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300  # a guard: the wait ends when the first checkpoint is written
    while not (save / "latest_checkpointed_iteration.txt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)

    def stop() -> str:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        out = log.read_text()
        assert proc.returncode == 0, out[-3000:]
        return out

    run = SimpleNamespace(save=save, stop=stop)
    yield run
    if proc.poll() is None:
        stop()


def latest_step(save: Path) -> int:
    """The newest whole checkpoint's step (the pointer is replaced by an atomic rename)."""
    return int((save / "latest_checkpointed_iteration.txt").read_text())


def test_seven_exports_during_retirement_all_succeed_and_a_slow_read_holds_its_checkpoint(training_run, tmp_path,
                                                                                          monkeypatch):
    for attempt in range(7):
        out = export_checkpoint(training_run.save, tmp_path / f"hf{attempt}", log=lambda *_: None)
        assert (out / "model.safetensors").is_file()

    real_load = export_module.load_model
    read = []

    def slow_read(record):
        read.append(record.path)
        # Two more saves happen meanwhile: the first of them would retire this checkpoint (its retirement comes
        # before the second save starts). Waited for, not slept for: a loaded machine saves later.
        step = int(record.path.name.removeprefix("iter_"))
        deadline = time.monotonic() + 300  # a guard only
        while int(latest_step(training_run.save)) < step + 2:
            assert time.monotonic() < deadline, "the run saved no further checkpoint"
            time.sleep(0.05)
        return real_load(record)

    monkeypatch.setattr(export_module, "load_model", slow_read)
    export_checkpoint(training_run.save, tmp_path / "slow", log=lambda *_: None)
    assert len(read) == 1  # read in one go
    log = training_run.stop()
    assert f"kept {read[0]} for now: being read (.reader." in log
    assert not read[0].exists()  # retired by a save after the read
