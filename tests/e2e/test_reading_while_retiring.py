"""Exporting from a save folder while its run retires checkpoints (--keep-last 1, a save every step): every
export succeeds, reading the newest whole checkpoint again when its folder is retired part-way."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megamlm.hf import export as export_module
from megamlm.hf.export import export_checkpoint

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
         "--num-query-groups", "2", "--seq-length", "32", "--global-batch-size", "2", "--micro-batch-size", "2",
         "--train-iters", "100000", "--save-interval", "1", "--keep-last", "1", "--log-interval", "50"]


@pytest.fixture
def training_run(tmp_path, cache_dir):
    save = tmp_path / "run"
    env = {**os.environ, "MEGAMLM_CACHE": cache_dir, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "pretrain.py"), *TRAIN, "--save", str(save)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (save / "latest_checkpointed_iteration.txt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.2)
    yield save
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]


def test_seven_exports_during_retirement_all_succeed(training_run, tmp_path, monkeypatch, capsys):
    real_load = export_module.load_model
    calls = []

    def slow_first_read(record):
        calls.append(record.path)
        if len(calls) == 1:  # the first read of each export outlasts several saves: its folder is retired meanwhile
            time.sleep(1.0)
        return real_load(record)

    monkeypatch.setattr(export_module, "load_model", slow_first_read)
    for attempt in range(7):
        calls.clear()
        out = export_checkpoint(training_run, tmp_path / f"hf{attempt}", log=lambda *_: None)
        assert (out / "model.safetensors").is_file()
        assert len(calls) >= 2 and calls[0] != calls[-1]  # retired while read, then read again from a newer one
    assert capsys.readouterr().out.count("was retired (--keep-last) while it was read") >= 7
