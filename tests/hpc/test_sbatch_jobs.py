"""examples/slurm/pretrain_nvidia.sbatch on a real SLURM (the stage's one-node cluster), CPU-adapted through its
documented variables: a run trains, saves and exits 0 from a folder without logs/; a USR1 warning saves, requeues
and resumes to the straight run's final loss; two jobs on the node at once both complete."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurm_jobs import (CPU_JOB, REPO, TINY, job_env, job_field, last_loss, latest_step, sbatch, wait_for_end,
                        wait_for_log, wait_until)

SCRIPT = str(REPO / "examples" / "slurm" / "pretrain_nvidia.sbatch")


def test_a_job_trains_saves_and_exits_0_from_a_folder_without_logs(tmp_path):
    """sbatch --wait, as a user runs it from a fresh folder: the log lands in that folder (no logs/ needed)."""
    out = subprocess.run(["sbatch", "--wait", "--parsable", *CPU_JOB, "--export=ALL,GPUS_PER_NODE=0", SCRIPT, *TINY,
                          "--train-iters", "6", "--save", str(tmp_path / "run")],
                         cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=600)
    job = out.stdout.strip().split(";")[0]
    log = tmp_path / f"megamlm-{job}.out"
    assert out.returncode == 0, (out.stderr, log.read_text() if log.exists() else "no log")
    text = log.read_text()
    assert "] step 6/6" in text and "--device cpu" not in out.stderr
    assert latest_step(tmp_path / "run") == 6
    assert job_field(int(job), "JobState") == "COMPLETED" and job_field(int(job), "ExitCode") == "0:0"


def test_a_usr1_warning_saves_requeues_and_resumes_to_the_straight_runs_loss(tmp_path):
    iters = ["--train-iters", "40", "--save-interval", "1000"]
    straight = subprocess.run([sys.executable, str(REPO / "pretrain.py"), *TINY, *iters, "--device", "cpu",
                               "--save", str(tmp_path / "straight")], env=job_env(), capture_output=True, text=True,
                              timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]

    job = sbatch([*CPU_JOB, "--export=ALL,GPUS_PER_NODE=0", SCRIPT, *TINY, *iters, "--save", str(tmp_path / "run")],
                 tmp_path)
    log = tmp_path / f"megamlm-{job}.out"
    wait_for_log(log, "] step 3/40")
    subprocess.run(["scancel", "--signal=USR1", str(job)], check=True, timeout=60)
    wait_for_log(log, f"requeueing job {job}")
    assert wait_for_end(job) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert job_field(job, "Restarts") == "1" and "received SIGUSR1" in text
    stopped = int(text.split("megamlm: stopped at step ")[1].split()[0])
    assert 3 <= stopped < 40 and f"iter_{stopped:07d} at step {stopped}" in text  # the resume
    assert latest_step(tmp_path / "run") == 40
    assert last_loss(tmp_path / "run") == pytest.approx(last_loss(tmp_path / "straight"), rel=1e-5)


def test_two_jobs_on_one_node_at_once_both_complete(tmp_path):
    """Each job's rendezvous port comes from its job id: the second torchrun does not join the first's store."""
    jobs = [sbatch([*CPU_JOB, "--export=ALL,GPUS_PER_NODE=0", SCRIPT, *TINY, "--train-iters", "30",
                    "--save", str(tmp_path / f"run{i}")], tmp_path) for i in range(2)]
    # Both run at the same time (the node has a CPU for each), then both finish.
    wait_until(lambda: all(job_field(j, "JobState") == "RUNNING" for j in jobs), "both jobs running at once")
    states = [wait_for_end(j) for j in jobs]
    logs = [(tmp_path / f"megamlm-{j}.out").read_text() for j in jobs]
    assert states == ["COMPLETED", "COMPLETED"], [text[-2000:] for text in logs]
    assert all(latest_step(tmp_path / f"run{i}") == 30 for i in range(2))
