"""Where a process learns its rank: torchrun, SLURM (srun) or an MPI launcher, and the process group.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT itself. Under ``mpirun`` (Open MPI,
MPICH, Intel MPI, MVAPICH) or a bare ``srun`` the same facts live in launcher-specific variables (read by
``megamlm.launcher_env``); ``torch_env_vars`` maps them to torch's names so ``init_process_group("env://")`` works
everywhere. The master address comes from MASTER_ADDR, the first host of SLURM's node list, or (with mpi4py
installed) rank 0's host name broadcast over MPI.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from datetime import timedelta
from typing import Mapping

import torch
import torch.distributed as dist

from megamlm import extras
from megamlm.errors import UserError
from megamlm.launcher_env import detect_launcher, launcher_variables
from megamlm.log import write_line

DEFAULT_MASTER_PORT = "29500"


class LaunchError(UserError, RuntimeError):
    """The launcher's environment is incomplete; the message names the variable to set."""


def first_slurm_host(nodelist: str) -> str:
    """``gpu[003-005,9],cpu1`` -> ``gpu003`` (what ``scontrol show hostnames | head -1`` prints)."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise LaunchError(f"cannot read a host from SLURM node list {nodelist!r}; set MASTER_ADDR")
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _mpi_master_addr() -> str | None:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD.bcast(socket.gethostname(), root=0)


def torch_env_vars(environ: Mapping[str, str] | None = None, resolve_master=_mpi_master_addr) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT for this process ({} for a plain process)."""
    env = os.environ if environ is None else environ
    launcher = detect_launcher(env)
    if launcher is None:
        return {}
    rank, size, local = launcher_variables(launcher)
    out = {"RANK": env[rank], "WORLD_SIZE": env[size], "LOCAL_RANK": env.get(local, "0")}
    master = env.get("MASTER_ADDR")
    if master is None and "SLURM_JOB_NODELIST" in env:
        master = first_slurm_host(env["SLURM_JOB_NODELIST"])
    if master is None and launcher in ("openmpi", "mvapich", "pmi"):
        master = resolve_master()
    if master is None:
        if int(env[size]) > 1 and launcher != "torchrun":
            raise LaunchError(f"launched by {launcher} without MASTER_ADDR; export MASTER_ADDR=<host of rank 0> "
                              "(e.g. `mpirun -x MASTER_ADDR=$(hostname)`) or install mpi4py "
                              f"({extras.install_command('mpi4py')})")
        master = "127.0.0.1"
    out["MASTER_ADDR"] = master
    out["MASTER_PORT"] = env.get("MASTER_PORT", DEFAULT_MASTER_PORT)
    return out


def backend_for(device_type: str) -> str:
    """gloo on CPU; on CUDA, nccl for the device's tensors (RCCL on ROCm builds of torch answers to the same name)
    and gloo for the numbers the host already holds (the global predicted-token count, the stop and skip
    agreements): reduced between hosts, they do not make the host wait for the device's queued work."""
    return "cuda:nccl,cpu:gloo" if device_type == "cuda" else "gloo"


def host_collective_device(group=None) -> torch.device:
    """Where to put a tensor of host-side numbers for a collective over ``group`` (the default group when None):
    the CPU when the group reduces CPU tensors (gloo, or the nccl + gloo group ``backend_for`` makes), else the
    current CUDA device (a group someone else started with nccl alone; the host then waits for the device)."""
    return collective_device_for(str(dist.get_backend(group)), torch.cuda.is_available())


def collective_device_for(backend: str, cuda_available: bool) -> torch.device:
    if "gloo" in backend or "mpi" in backend or not cuda_available:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def restart_store_warning(environ: Mapping[str, str] | None = None) -> str | None:
    """A warning line when torchrun restarts workers (--max-restarts) through a rendezvous store it shares with them.

    torch's default since 2.5: the workers' process group uses the agent's TCPStore, the same server every restart
    round, with no per-round prefix (workers know only their own agent's restart count, which differs between nodes
    when one node's worker failed and the other's was stopped). A restarted worker can then read the last round's
    address of a peer and fail to connect, spending its restart: pytorch/pytorch#135712, and what the HPC stage's two
    nodes showed ('Gloo connectFullMesh failed ... Connection refused', then a hang). torch's opt-out,
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment, gives every round a fresh store on rank 0."""
    environ = os.environ if environ is None else environ
    try:
        restarts = int(environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    except ValueError:
        return None
    if restarts > 0 and environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        return (f"warning: torchrun --max-restarts {restarts} shares its rendezvous store with the workers, so a "
                "restarted worker can read the last round's addresses and fail (pytorch/pytorch#135712); start "
                "torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (examples/torchrun_forward_signals.sh does)")
    return None


def init_distributed(device_type: str, timeout_minutes: float = 30.0) -> tuple[int, int, int]:
    """Start the default process group from the launcher's environment; returns (rank, world size, local rank).

    A plain process (no launcher) gets (0, 1, 0) and no process group.
    """
    env = torch_env_vars()
    if not env or int(env["WORLD_SIZE"]) == 1:
        return 0, 1, 0
    os.environ.update(env)
    rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    if device_type == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device_type), init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(minutes=timeout_minutes))
    warning = restart_store_warning()
    if warning and rank == 0:
        write_line(warning, sys.stderr)
    return rank, world, local
