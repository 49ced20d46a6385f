"""examples/slurm/pretrain_nvidia.sbatch on a real SLURM (the stage's cluster, its CPU partition), CPU-adapted
through its documented variables: two runs at once train, save and exit 0 from a folder without logs/; a USR1 warning
to a job on two nodes saves, requeues and resumes to the straight run's final loss, quietly; from outside the
repository root the job says in one line to set REPO."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from slurm_jobs import (
    CPU_JOB,
    REPO,
    TINY,
    job_env,
    job_field,
    last_loss,
    latest_step,
    sbatch,
    start_requeued,
    wait_for_end,
    wait_for_log,
    wait_until,
)

SCRIPT = str(REPO / "examples" / "slurm" / "pretrain_nvidia.sbatch")


def test_two_jobs_at_once_train_save_and_exit_0_from_a_folder_without_logs(tmp_path):
    """sbatch --wait, as a user runs it from a fresh folder: the log lands in that folder (no logs/ needed). Two
    jobs share the node at once; each job's rendezvous port comes from its job id, so the second torchrun does not
    join the first one's store."""
    waits = [subprocess.Popen(["sbatch", "--wait", "--parsable", *CPU_JOB, "--export=ALL,GPUS_PER_NODE=0", SCRIPT,
                               *TINY, "--train-iters", "30", "--save", str(tmp_path / f"run{i}")],
                              cwd=tmp_path, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    # --parsable prints the id at submission; --wait returns when the job ends, with its exit code.
    jobs = [int(w.stdout.readline().strip().split(";")[0]) for w in waits]
    wait_until(lambda: all(job_field(j, "JobState") == "RUNNING" for j in jobs), "both jobs running at once")
    codes = [w.wait(timeout=600) for w in waits]
    logs = [tmp_path / f"megamlm-{j}.out" for j in jobs]
    assert codes == [0, 0], [log.read_text()[-2000:] if log.exists() else "no log" for log in logs]
    for i, (job, log) in enumerate(zip(jobs, logs)):
        assert "] step 30/30" in log.read_text() and latest_step(tmp_path / f"run{i}") == 30
        assert job_field(job, "JobState") == "COMPLETED" and job_field(job, "ExitCode") == "0:0"


def test_a_usr1_warning_saves_requeues_and_resumes_to_the_straight_runs_loss(tmp_path):
    # Long enough that the signal lands mid-run on an idle machine too (a step of this model takes ~25 ms there).
    iters = ["--train-iters", "300", "--save-interval", "1000"]
    straight = subprocess.run([sys.executable, str(REPO / "pretrain.py"), *TINY, *iters, "--device", "cpu",
                               "--save", str(tmp_path / "straight")], env=job_env(), capture_output=True, text=True,
                              timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]

    # On the stage's two nodes: one torchrun per node, data parallel across them (elsewhere: one node).
    nodes = 2 if os.environ.get("MEGAMLM_HPC_TWO_NODES") == "1" else 1
    job = sbatch([*CPU_JOB, f"--nodes={nodes}", "--export=ALL,GPUS_PER_NODE=0", SCRIPT, *TINY, *iters, "--save",
                  str(tmp_path / "run")], tmp_path)
    log = tmp_path / f"megamlm-{job}.out"
    wait_for_log(log, "] step 3/300")
    subprocess.run(["scancel", "--signal=USR1", str(job)], check=True, timeout=60)
    wait_for_log(log, f"requeueing job {job}")
    start_requeued(job)
    assert wait_for_end(job) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert job_field(job, "Restarts") == "1" and "received SIGUSR1" in text
    assert f"parallel layout: world {nodes}" in text and "Traceback" not in text  # a clean stop is quiet
    stopped = int(text.split("megamlm: stopped at step ")[1].split()[0])
    assert 3 <= stopped < 300 and f"iter_{stopped:07d} at step {stopped}" in text  # the resume
    assert latest_step(tmp_path / "run") == 300
    assert last_loss(tmp_path / "run") == pytest.approx(last_loss(tmp_path / "straight"), rel=1e-5)


def test_a_script_submitted_outside_the_repository_root_says_in_one_line_to_set_repo(tmp_path):
    """sbatch runs a copy of the script, which finds megamlm in the submission folder: from elsewhere, without REPO,
    the job fails at once with exit 2 and one line naming the fix (not exit 127 on a missing with_requeue.sh)."""
    env = job_env()
    env.pop("REPO")
    job = sbatch([*CPU_JOB, SCRIPT, *TINY, "--train-iters", "2", "--save", str(tmp_path / "run")], tmp_path, env)
    assert wait_for_end(job) == "FAILED" and job_field(job, "ExitCode") == "2:0"
    lines = (tmp_path / f"megamlm-{job}.out").read_text().splitlines()
    assert lines == [f"megamlm: no pretrain.py in {tmp_path}: sbatch runs a copy of this script, which finds megamlm "
                     "in the folder you submit from; submit from the repository root, or set REPO=/path/to/megamlm "
                     "(sbatch passes it on)"], lines
