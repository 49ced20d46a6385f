"""The launch scripts: valid bash, and the torchrun / mpirun commands they generate parse and plan a valid layout.

Two tests really launch torchrun through examples/run_local.sh (one stopped by SIGINT and SIGTERM: exit code 0
after the save); the slow one starts two plain `pretrain.py` processes given the environment Open MPI's mpirun
would give them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SPLITTABLE_SHAPE

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [REPO / "examples" / "run_local.sh", REPO / "examples" / "run_mpirun.sh",
           REPO / "examples" / "slurm" / "pretrain_nvidia.sbatch", REPO / "examples" / "slurm" / "pretrain_rocm.sbatch"]
FORWARDER = REPO / "examples" / "torchrun_forward_signals.sh"
LAYOUT = ["--model", "610m", "--tp", "2", "--pp", "2", "--micro-batch-size", "2", "--global-batch-size", "64"]
TINY_RUN = [*SPLITTABLE_SHAPE, "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
            "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "1", "--log-interval", "1", "--objective", "clm_then_mlm",
            "--switch", "0.5"]


@pytest.mark.parametrize("script", [*SCRIPTS, FORWARDER], ids=lambda p: p.name)
def test_script_is_valid_bash_and_executable(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.stat().st_mode & stat.S_IXUSR


def printed_command(script: Path, env: dict, args: list[str]) -> list[str]:
    out = subprocess.run(["bash", str(script), *args], env={**os.environ, **env, "PRINT_CMD": "1"},
                         capture_output=True, text=True, check=True)
    return shlex.split(out.stdout)


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def pretrain_flags(cmd: list[str]) -> list[str]:
    return cmd[next(i for i, a in enumerate(cmd) if a.endswith("pretrain.py")) + 1:]


def check_layout_plans(flags: list[str], world: int) -> None:
    from megamlm.config import parse_args
    from megamlm.training.startup import dims_from_config

    dims = dims_from_config(parse_args(flags + ["--dry-run", "--world-size", str(world)]))
    assert dims.world_size == world


@pytest.mark.parametrize("script", SCRIPTS[2:], ids=lambda p: p.name)
def test_sbatch_discovers_the_head_node_and_builds_srun_torchrun(script, tmp_path):
    fake_scontrol = tmp_path / "scontrol"
    fake_scontrol.write_text("#!/bin/bash\n# scontrol show hostnames LIST\nprintf 'gpu012\\ngpu013\\n'\n")
    fake_scontrol.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[012-013]",
           "SLURM_JOB_ID": "4242", "SLURM_GPUS_ON_NODE": "8"}
    env_clean = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run(["bash", str(script), *LAYOUT], env={**env_clean, **env, "PRINT_CMD": "1"},
                         capture_output=True, text=True, check=True)
    cmd = shlex.split(out.stdout)
    assert cmd[:2] == ["srun", str(FORWARDER)]
    assert option(cmd, "--nnodes") == "2" and option(cmd, "--nproc-per-node") == "8"
    assert option(cmd, "--rdzv-endpoint") == "gpu012:19242" and option(cmd, "--rdzv-id") == "4242"
    flags = pretrain_flags(cmd)
    assert flags[:2] == ["--device", "cuda"] and flags[2:] == LAYOUT
    check_layout_plans(flags, world=16)


def sbatch_command(script: Path, tmp_path: Path, env: dict) -> list[str]:
    fake_scontrol = tmp_path / "scontrol"
    fake_scontrol.write_text("#!/bin/bash\nprintf 'node1\\n'\n")
    fake_scontrol.chmod(0o755)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE", "NPROC_PER_NODE", "CPUS_PER_RANK",
                          "OMP_NUM_THREADS") and not k.startswith("SLURM_")}
    out = subprocess.run(["bash", str(script), "--model", "tiny"],
                         env={**clean, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_NNODES": "1",
                              "SLURM_JOB_NODELIST": "node1", "PRINT_CMD": "1", **env},
                         capture_output=True, text=True, check=True)
    return shlex.split(out.stdout)


@pytest.mark.parametrize("script", SCRIPTS[2:], ids=lambda p: p.name)
def test_two_jobs_on_one_node_get_different_rendezvous_ports_unless_one_is_set(script, tmp_path):
    first = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "8"})
    second = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "8", "SLURM_GPUS_ON_NODE": "8"})
    assert option(first, "--rdzv-endpoint") != option(second, "--rdzv-endpoint")
    chosen = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "8", "MASTER_PORT": "23456"})
    assert option(chosen, "--rdzv-endpoint") == "node1:23456"


@pytest.mark.parametrize("script", SCRIPTS[2:], ids=lambda p: p.name)
def test_an_allocation_without_gpus_runs_on_its_cpus(script, tmp_path):
    """A CPU partition: no SLURM_GPUS_ON_NODE. One rank with every CPU of the allocation by default, one rank per
    CPUS_PER_RANK otherwise, --device cpu, and the user's arguments last (a --device of theirs wins)."""
    cmd = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "16"})
    assert option(cmd, "--nproc-per-node") == "1"
    assert pretrain_flags(cmd) == ["--device", "cpu", "--model", "tiny"]
    cmd = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "16", "CPUS_PER_RANK": "4"})
    assert option(cmd, "--nproc-per-node") == "4"
    # A GPU-shaped job run on a CPU partition through the documented variable:
    cmd = sbatch_command(script, tmp_path, {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "8", "GPUS_PER_NODE": "0",
                                            "SLURM_CPUS_ON_NODE": "2", "CPUS_PER_RANK": "1"})
    assert option(cmd, "--nproc-per-node") == "2" and pretrain_flags(cmd)[:2] == ["--device", "cpu"]


@pytest.mark.parametrize("script", SCRIPTS[2:], ids=lambda p: p.name)
def test_the_job_log_needs_no_folder_made_before_the_job_starts(script):
    """sbatch opens --output before the script's first line runs: a folder in it would have to exist already."""
    [output] = [line.split("=", 1)[1] for line in script.read_text().splitlines()
                if line.startswith("#SBATCH --output=")]
    assert "/" not in output, output


def test_run_local_builds_a_standalone_torchrun():
    cmd = printed_command(SCRIPTS[0], {"NPROC": "4"}, LAYOUT)
    assert cmd[:2] == [str(FORWARDER), "--standalone"] and option(cmd, "--nproc-per-node") == "4"
    assert pretrain_flags(cmd) == LAYOUT
    check_layout_plans(pretrain_flags(cmd), world=4)


@pytest.mark.parametrize("args,expected", [
    (["--max-restarts", "1", "pretrain.py"], "1"), (["--max_restarts=2", "pretrain.py"], "1"),
    (["--max-restarts", "0", "pretrain.py"], ""), (["pretrain.py", "--max-restarts", "3"], ""),
    (["--standalone", "pretrain.py"], "")])
def test_the_forwarder_gives_torchruns_restarts_a_fresh_store_each_round(tmp_path, args, expected):
    """torchrun --max-restarts N > 0 gets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (pytorch/pytorch#135712: a restarted
    worker read a dead peer's address from the shared store on the HPC stage's two nodes); a training script's own
    flag of that name is not torchrun's."""
    fake = tmp_path / "torchrun"
    fake.write_text("#!/bin/bash\necho \"store=${TORCH_DISABLE_SHARE_RDZV_TCP_STORE:-}\"\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    out = subprocess.run(["bash", str(FORWARDER), *args], env={**env, "PATH": f"{tmp_path}:{env['PATH']}"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"store={expected}", (out.stdout, out.stderr)


def test_a_worker_under_restarts_with_the_shared_store_warns_and_names_the_setting():
    from megamlm.parallel.launch import restart_store_warning

    shared = {"TORCHELASTIC_MAX_RESTARTS": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in restart_store_warning(shared)
    assert restart_store_warning({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None
    assert restart_store_warning({**shared, "TORCHELASTIC_MAX_RESTARTS": "0"}) is None


def test_mpirun_exports_the_master_address_to_every_rank():
    cmd = printed_command(SCRIPTS[1], {"NP": "8", "MASTER_ADDR": "head", "HOSTS": "a:4,b:4", "MASTER_PORT": "29500"},
                          LAYOUT)
    assert cmd[:3] == ["mpirun", "-np", "8"] and option(cmd, "--host") == "a:4,b:4"
    exported = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"]
    assert "MASTER_ADDR=head" in exported and "MASTER_PORT=29500" in exported
    check_layout_plans(pretrain_flags(cmd), world=8)


def test_mpirun_options_before_a_double_dash_go_to_mpirun():
    cmd = printed_command(SCRIPTS[1], {"NP": "4"}, ["--hostfile", "hosts", "-x", "NCCL_DEBUG", "--bind-to", "socket",
                                                    "--", *LAYOUT])
    mpirun = cmd[:next(i for i, a in enumerate(cmd) if a == "python")]
    assert option(mpirun, "--hostfile") == "hosts" and option(mpirun, "--bind-to") == "socket"
    assert "NCCL_DEBUG" in [mpirun[i + 1] for i, a in enumerate(mpirun) if a == "-x"]
    assert ("--allow-run-as-root" in mpirun) == (os.geteuid() == 0)  # Open MPI refuses root without it
    assert pretrain_flags(cmd) == LAYOUT
    check_layout_plans(pretrain_flags(cmd), world=4)


def test_mpirun_outside_slurm_picks_a_free_port_and_inside_one_per_job():
    env = {"NP": "2", "MASTER_ADDR": "", "MASTER_PORT": ""}
    ports = set()
    for extra in ({"SLURM_JOB_ID": "7"}, {"SLURM_JOB_ID": "8"}):
        cmd = printed_command(SCRIPTS[1], {**env, **extra}, LAYOUT)
        ports.add(next(a for a in cmd if a.startswith("MASTER_PORT=")))
    assert len(ports) == 2 and "MASTER_PORT=29500" not in ports


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("megamlm-cache"))


def launch_env(cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "SLURM_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "MEGAMLM_CACHE": cache, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (torchrun's workers run in sessions of their own)."""
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*/children"):
            with contextlib.suppress(OSError):   # the task ended meanwhile
                pids += [int(c) for c in task.read_text().split()]
        i += 1
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def launch_until_step(args: list[str], env: dict, step: int, signum: int,
                      sigint: signal.Handlers = signal.SIG_DFL) -> tuple[int, str, str]:
    """Run examples/run_local.sh with SIGINT's disposition set to ``sigint`` (SIG_IGN: as a background start leaves
    it), send ``signum`` to the script once rank 0 logged ``step``; (status, out, err)."""
    proc = subprocess.Popen(["bash", str(SCRIPTS[0]), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if f"] step {step}/" in line:
                proc.send_signal(signum)
                break
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:   # the signal did not stop it: do not leave a 100,000-step run behind
            kill_tree(proc.pid)
    return proc.returncode, "".join(lines) + out, err


def test_run_local_trains_with_torchrun_and_a_stop_signal_saves_and_the_script_exits_0(cache, tmp_path):
    """run_local.sh trains with torchrun on CPU (TP=2 on 2 ranks), rank 0 alone printing the start-up and progress
    lines. Ctrl-C (SIGINT) and SIGTERM reach the ranks, not torchrun's agent: a clean save, exit code 0, no
    traceback, and the same command resumes from that checkpoint. The SIGINT launch starts with SIGINT ignored, as
    any background start (`cmd &` in a script, nohup, CI runners) leaves it and as bash cannot trap by itself."""
    save = tmp_path / "run"
    # Long enough that it cannot end before the signal, however late this process reads the step line (a loaded
    # machine ran 400 steps before it did): the stops come from the signals, never from the end of the run.
    switch_at_step_1 = [arg for arg in TINY_RUN if arg not in ("--switch", "0.5")] + ["--switch-step", "1"]
    args = [*switch_at_step_1, "--tp", "2", "--train-iters", "100000", "--save", str(save)]
    env = {**launch_env(cache), "NPROC": "2"}
    status, out, err = launch_until_step(args, env, 2, signal.SIGINT, sigint=signal.SIG_IGN)
    assert status == 0, err[-3000:]
    assert "received SIGINT" in out and "Traceback" not in err and "SignalException" not in err
    assert "parallel layout: world 2 | TP 2" in out and "objective switch after step 1: clm -> mlm" in out
    # Both ranks print into this stream: start-up and progress lines come from rank 0 alone.
    for line in ("] model: ", "] objective clm_then_mlm", "] data: ", "] kernels ", "] step 2/"):
        assert out.count(line) == 1, (line, out)
    first = int((save / "latest_checkpointed_iteration.txt").read_text())
    assert first >= 2 and f"stopping after step {first} (signal SIGINT)" in out

    status, out, err = launch_until_step(args, env, first + 1, signal.SIGTERM)
    assert status == 0, err[-3000:]
    assert f"resumed from {save / f'iter_{first:07d}'} at step {first}" in out and "Traceback" not in err
    assert int((save / "latest_checkpointed_iteration.txt").read_text()) > first


@pytest.mark.slow
def test_ranks_started_by_an_mpi_launcher_find_each_other(cache, tmp_path):
    from helpers import free_port

    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {**launch_env(cache), "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
               "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, str(REPO / "pretrain.py"), *TINY_RUN],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    assert "parallel layout: world 2 | TP 1 | PP 1 | DP 2" in outputs[0][0]
