"""Two ranks under a real Open MPI mpirun: with mpi4py (rank 0's host found through MPI, no MASTER_ADDR) and
without it (examples/run_mpirun.sh exports MASTER_ADDR); SIGTERM to run_mpirun.sh, and SIGUSR1 to mpirun itself,
leave a whole checkpoint and exit 0, and the same command resumes from it."""

from __future__ import annotations

import os
import signal
import subprocess

from nodes import NODE1, NODE2, mpirun_options, on_node
from slurm_jobs import REPO, TINY, job_env, latest_step, wait_for_log

LAUNCHER = str(REPO / "examples" / "run_mpirun.sh")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def without_mpi4py(tmp_path) -> dict:
    """An mpi4py that cannot be imported, first on the ranks' path: megamlm then runs as without the package."""
    fake = tmp_path / "no_mpi4py" / "mpi4py"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('mpi4py hidden by the test')\n")
    return job_env(PYTHONPATH=f"{fake.parent}{os.pathsep}{REPO}")


def test_two_ranks_train_with_mpi4py_finding_rank_0s_host(tmp_path):
    """On the stage's two nodes: mpirun started on mmnode2, rank 0 on mmnode1 and rank 1 on mmnode2, so rank 0's
    host is not the launching one (elsewhere: both ranks on this host)."""
    import mpi4py  # noqa: F401  (the stage installs it)

    env = job_env()
    env.pop("MASTER_ADDR", None)
    command = ["mpirun", "-np", "2", *(["--allow-run-as-root"] if os.geteuid() == 0 else []),
               "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "MASTER_PORT",
               "python3", str(REPO / "pretrain.py"), *TINY, "--device", "cpu", "--train-iters", "6",
               "--save", str(tmp_path / "run")]
    if os.environ.get("MEGAMLM_HPC_TWO_NODES") == "1":
        command = on_node(NODE2, [*command[:3], *mpirun_options(), "--host", f"{NODE1}:1,{NODE2}:1", *command[3:]])
    out = subprocess.run(command, env={**env, "MASTER_PORT": str(free_port())}, cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "parallel layout: world 2" in out.stdout and latest_step(tmp_path / "run") == 6


def test_sigterm_to_run_mpirun_saves_a_whole_checkpoint_and_the_same_command_resumes(tmp_path):
    env = {**without_mpi4py(tmp_path), "NP": "2"}
    save = tmp_path / "run"
    command = ["bash", LAUNCHER, *TINY, "--device", "cpu", "--train-iters", "400", "--save-interval", "1000",
               "--save", str(save)]
    log = tmp_path / "first.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, text=True)
        wait_for_log(log, "] step 3/400")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "received SIGUSR1" in text and "Traceback" not in text
    step = latest_step(save)
    assert step >= 3 and (save / f"iter_{step:07d}" / "COMPLETE.json").exists()
    assert not list(save.glob("*.tmp"))

    # SIGUSR1 to mpirun itself (a SLURM --signal=USR1@... warning reaches it so): forwarded to the ranks, which save.
    log = tmp_path / "second.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, text=True)
        wait_for_log(log, f"] step {step + 2}/400")
        mpirun = subprocess.run(["pgrep", "-P", str(proc.pid), "-x", "mpirun"], capture_output=True, text=True)
        os.kill(int(mpirun.stdout.split()[0]), signal.SIGUSR1)
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert f"resumed from {save / f'iter_{step:07d}'} at step {step}" in text
    assert latest_step(save) > step and (save / f"iter_{latest_step(save):07d}" / "COMPLETE.json").exists()
