"""Pre-emption and crashes from outside the process: SIGTERM, a second SIGTERM, SIGKILL in the middle of a save.

Each run is `pretrain.py`'s command line in a child process, through a small driver that records the per-step
losses (exact floats) to a file and can pause inside a checkpoint save, after the shards are written and before
the completion marker, or after a step until a signal has arrived, so the test can deliver its signal there (a run
never races the test to its end).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_BATCH, TINY_SHAPE
from step_recorder import StepRecorder

from megamlm.checkpoint import resolve_checkpoint
from megamlm.config import parse_args
from megamlm.training.stopping import SAME_REQUEST_S
from megamlm.training.trainer import pretrain

REPO = Path(__file__).resolve().parents[2]
ARGS = [*TINY_SHAPE, *TINY_BATCH, "--objective", "clm_then_mlm", "--switch", "0.5", "--train-iters", "8",
        "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2", "--log-interval", "1"]

DRIVER = r'''
import json, os, sys, time
import torch
torch.set_num_threads(1)
from megamlm.checkpoint import checkpointer
from megamlm.training import trainer

pause_in = os.environ.get("PAUSE_IN_SAVE_OF")
if pause_in:
    write_rank_completion = checkpointer.write_rank_completion

    def pausing(folder, rank, names):
        write_rank_completion(folder, rank, names)
        if folder.name == f"iter_{int(pause_in):07d}.tmp":
            open(os.environ["PAUSED_FLAG"], "w").close()
            time.sleep(600)

    checkpointer.write_rank_completion = pausing

hold_after = os.environ.get("HOLD_AFTER_STEP")
if hold_after:  # the run waits after this step until the test's signal has arrived: it cannot finish first
    from megamlm.training import stopping
    reason_to_stop = stopping.StopPolicy.reason_to_stop

    def holding(self, step):
        if step == int(hold_after):
            open(os.environ["PAUSED_FLAG"], "w").close()
            while not self.signals.requested:
                time.sleep(0.01)
        return reason_to_stop(self, step)

    stopping.StopPolicy.reason_to_stop = holding

from step_recorder import StepRecorder  # tests/ is on PYTHONPATH (Run)

pretrain = trainer.pretrain

def recording(cfg, on_step=None):
    recorder = StepRecorder()
    result = pretrain(cfg, on_step=recorder)
    with open(os.environ["LOSSES_OUT"], "w") as f:
        json.dump({"losses": recorder.losses, "start_step": result.start_step, "stop_reason": result.stop_reason}, f)
    return result

trainer.pretrain = recording
from megamlm.cli import main
sys.exit(main(sys.argv[1:]))
'''


class Run:
    def __init__(self, tmp_path: Path, name: str, save: Path, cache_dir: str, pause_in_save_of: int | None = None,
                 extra: tuple[str, ...] = (), hold_after_step: int | None = None):
        self.out = tmp_path / f"{name}.json"
        self.paused = tmp_path / f"{name}.paused"
        driver = tmp_path / "driver.py"
        driver.write_text(DRIVER)
        python_path = os.pathsep.join([str(REPO), str(REPO / "tests")])  # the driver imports tests/step_recorder.py
        env = {**os.environ, "PYTHONPATH": python_path, "MEGAMLM_CACHE": cache_dir, "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1", "LOSSES_OUT": str(self.out), "PAUSED_FLAG": str(self.paused)}
        if pause_in_save_of is not None:
            env["PAUSE_IN_SAVE_OF"] = str(pause_in_save_of)
        if hold_after_step is not None:
            env["HOLD_AFTER_STEP"] = str(hold_after_step)
        self.proc = subprocess.Popen([sys.executable, str(driver), *ARGS, "--save", str(save), *extra],
                                     cwd=tmp_path, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []

    def wait_for_line(self, text: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if text in line:
                return
        self.proc.kill()
        raise AssertionError(f"never printed {text!r}:\n{''.join(self.lines)}")

    def wait_for_pause(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not self.paused.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"never paused:\n{self.proc.stdout.read()}")
            time.sleep(0.05)

    def finish(self, timeout: float = 240) -> int:
        rest, _ = self.proc.communicate(timeout=timeout)
        self.lines.append(rest)
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def result(self) -> dict:
        data = json.loads(self.out.read_text())
        data["losses"] = {int(k): v for k, v in data["losses"].items()}
        return data


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("megamlm-cache"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    """The losses of the uninterrupted run (in this process, also on one thread: the same arithmetic)."""
    tmp = tmp_path_factory.mktemp("reference")
    threads, cache = torch.get_num_threads(), os.environ.get("MEGAMLM_CACHE")
    torch.set_num_threads(1)
    os.environ["MEGAMLM_CACHE"] = cache_dir
    try:
        recorder = StepRecorder()
        pretrain(parse_args(ARGS + ["--save", str(tmp / "ckpt")]), on_step=recorder)
        return recorder.losses
    finally:
        torch.set_num_threads(threads)
        if cache is None:
            del os.environ["MEGAMLM_CACHE"]
        else:
            os.environ["MEGAMLM_CACHE"] = cache


@pytest.mark.slow
def test_sigterm_saves_after_the_step_exits_0_and_the_relaunch_continues_bitwise(tmp_path, cache_dir, reference):
    save = tmp_path / "ckpt"
    first = Run(tmp_path, "first", save, cache_dir, hold_after_step=2)
    first.wait_for_pause()  # step 2 is done and the run waits for the signal
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == 0, first.log
    stopped = first.result()
    assert stopped["stop_reason"] == "signal SIGTERM", first.log
    last = max(stopped["losses"])
    assert last == 2 and (save / f"iter_{last:07d}").is_dir()
    assert (save / "latest_checkpointed_iteration.txt").read_text() == str(last)

    second = Run(tmp_path, "second", save, cache_dir)  # the same command line
    assert second.finish() == 0, second.log
    resumed = second.result()
    assert resumed["start_step"] == last and f"resumed from {save / f'iter_{last:07d}'}" in second.log
    assert {**stopped["losses"], **resumed["losses"]} == reference  # bitwise


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_save_resumes_from_the_previous_checkpoint(tmp_path, cache_dir, reference):
    save = tmp_path / "ckpt"
    # Checkpoints at 3 (--save-interval), 4 (the objective switch), 6 (killed while writing).
    killed = Run(tmp_path, "killed", save, cache_dir, pause_in_save_of=6, extra=("--save-interval", "3"))
    killed.wait_for_pause()
    killed.proc.kill()
    killed.finish()
    assert killed.proc.returncode == -signal.SIGKILL
    assert (save / "iter_0000006.tmp").is_dir() and not (save / "iter_0000006").exists()
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "4"

    relaunch = Run(tmp_path, "relaunch", save, cache_dir, extra=("--save-interval", "3"))
    assert relaunch.finish() == 0, relaunch.log
    resumed = relaunch.result()
    assert resumed["start_step"] == 4
    assert resumed["losses"] == {s: reference[s] for s in range(5, 9)}
    assert not (save / "iter_0000006.tmp").exists() and (save / "iter_0000006").is_dir()


@pytest.mark.slow
def test_a_second_sigterm_during_the_save_exits_at_once_and_corrupts_nothing(tmp_path, cache_dir):
    save = tmp_path / "ckpt"
    run = Run(tmp_path, "twice", save, cache_dir, pause_in_save_of=6, extra=("--save-interval", "3"))
    run.wait_for_pause()  # the save of step 6 is half-written
    run.proc.send_signal(signal.SIGTERM)  # first: asks to save and stop after the step
    run.wait_for_line("received SIGTERM")
    time.sleep(SAME_REQUEST_S + 0.2)  # sooner, it counts as the first delivered twice
    run.proc.send_signal(signal.SIGTERM)  # second: exits at once
    assert run.finish() == 128 + signal.SIGTERM  # at once: without the exit it would stay paused for 600 s
    assert "exiting now without saving" in run.log
    assert not (save / "iter_0000006").exists()
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert resolve_checkpoint(save) == save / "iter_0000004"
