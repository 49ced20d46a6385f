"""Helpers of the HPC stage's tests: submit, wait for jobs by their state (never by wall time alone), read logs."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A model of seconds per run on 2 loaded cores: the tokenizer's vocabulary, one narrow layer.
TINY = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
        "--num-query-groups", "2", "--seq-length", "32", "--global-batch-size", "4", "--micro-batch-size", "2",
        "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2", "--log-interval", "1"]
# The GPU-shaped example scripts on the CPU node, through their documented variables and sbatch's own options.
CPU_JOB = ["--nodes=1", "--gpus-per-node=0", "--cpus-per-task=1", "--time=15"]
LIMIT = 480
"""Seconds after which a job that never reaches its state fails the test (a hang, not a slow machine)."""


def job_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
           or k == "SLURM_CONF"}
    return {**env, "PYTHONPATH": str(REPO), "REPO": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def sbatch(args: list[str], cwd: Path, env: dict | None = None) -> int:
    out = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=env or job_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def job_field(job: int, name: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True, text=True, timeout=60).stdout
    match = re.search(rf"\b{name}=(\S*)", out)
    return match.group(1) if match else ""


def wait_until(condition, what: str, limit: float = LIMIT, every: float = 1.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not reached within {limit:.0f} s: {what}")


FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def wait_for_end(job: int, limit: float = LIMIT) -> str:
    return wait_until(lambda: (state := job_field(job, "JobState")) in FINAL_STATES and state, f"job {job} ends",
                      limit)


def wait_for_log(path: Path, text: str, limit: float = LIMIT) -> None:
    wait_until(lambda: path.exists() and text in path.read_text(errors="replace"), f"{text!r} in {path}", limit, 0.5)


def queue_empty() -> bool:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=60).stdout
    return not out.strip()


def last_loss(save: Path) -> float:
    import json

    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("kind") == "train"][-1]["loss"]


def latest_step(save: Path) -> int:
    return int((save / "latest_checkpointed_iteration.txt").read_text())


def start_requeued(job: int) -> None:
    """SLURM holds a requeued job about 2 minutes (its begin time; measured on 22.05): once it is pending again,
    start it 2 s from now instead. Not at once: a node refuses a job whose credential was made in the second its
    previous one was revoked ("Job credential revoked", the job then fails)."""
    wait_until(lambda: job_field(job, "JobState") == "PENDING", f"job {job} requeued")
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"], check=True, timeout=60)


def wait_for_end_starting_requeues(job: int, limit: float = LIMIT) -> str:
    """``wait_for_end``, starting the job 2 s after each requeue instead of SLURM's 2-minute hold (the job pending
    with reason BeginTime), however often it is requeued."""
    from datetime import datetime, timedelta

    def ended() -> str | None:
        state = job_field(job, "JobState")
        if state == "PENDING" and job_field(job, "Reason") == "BeginTime":
            begin = job_field(job, "StartTime")  # "Unknown" until the scheduler has looked at it
            if begin[:1].isdigit() and datetime.fromisoformat(begin) > datetime.now() + timedelta(seconds=5):
                # SLURM's hold, not the start set here
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"], timeout=60)
        return state if state in FINAL_STATES else None
    return wait_until(ended, f"job {job} ends", limit, every=2)
