"""Issue 42: Ctrl-C under `python pretrain.py ... | tee log`, the way most people keep a log. The terminal sends
SIGINT to the whole foreground group, so tee ends too and the run's standard output becomes a pipe without a reader:
the next log line (the signal handler's own) raised BrokenPipeError into the run, which exited 1 without a
checkpoint. The lines written after the reader died are lost, nothing else: a whole checkpoint, exit 0.

A real process (signals and a real pipe), whose pipe's reader this test is: it reads until training logs a step,
then closes its end (tee ending) and sends SIGINT to the run alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_under_tee_saves_a_whole_checkpoint_and_exits_0(tmp_path, cache_dir):
    env = {**os.environ, "MEGAMLM_CACHE": cache_dir, "MEGAMLM_PRETRAIN_ARGS": "", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    read_end, write_end = os.pipe()
    save = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, str(REPO / "pretrain.py"), "--train-iters", "100000", "--seq-length", "32",
         "--log-interval", "1", "--save", str(save)],
        stdout=write_end, stderr=subprocess.PIPE, cwd=tmp_path, env=env, text=True)
    os.close(write_end)
    reader = os.fdopen(read_end, "r")
    try:
        seen = []
        for line in reader:  # wait for the state "training has started", not for a time
            seen.append(line)
            if "step 2/" in line:
                break
        else:
            raise AssertionError("the run ended before training:\n" + "".join(seen) + process.stderr.read())
    finally:
        reader.close()  # tee is gone: the run's standard output is a pipe without a reader
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    checkpoints = sorted(save.glob("iter_*"))
    assert len(checkpoints) == 1 and (checkpoints[0] / "COMPLETE.json").is_file(), checkpoints
