"""What the launcher announced in the environment: torchrun, SLURM (srun) or an MPI launcher, and this process's
rank, the world size and the local rank it gave.

Only reads environment variables (no process group, no torch), so the lowest floor (``megamlm.log``) and the
flag checks can ask before anything starts; ``megamlm.parallel.launch`` turns these into the process group.
This module imports nothing from megamlm.
"""

from __future__ import annotations

import os
from typing import Mapping

# (launcher, rank, world size, local rank) variables of each launcher, most specific first.
LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    # SLURM_STEP_NUM_TASKS is set by srun for the tasks of a step, not in the batch script itself, so a plain
    # `python pretrain.py` inside an allocation stays a single process.
    ("slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
)


def detect_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher whose rank and world-size variables are both set (``torchrun``, ``openmpi``, ...), else None."""
    env = os.environ if environ is None else environ
    for name, rank, size, _ in LAUNCHERS:
        if rank in env and size in env:
            return name
    return None


def launcher_variables(launcher: str) -> tuple[str, str, str]:
    """The (rank, world size, local rank) variable names of ``launcher``."""
    return next(entry[1:] for entry in LAUNCHERS if entry[0] == launcher)


def _announced(environ: Mapping[str, str] | None, column: int, plain: int) -> int:
    """Column 0 (rank), 1 (world size) or 2 (local rank) of the detected launcher's variables; ``plain`` without a
    launcher (and for a local rank the launcher did not set)."""
    env = os.environ if environ is None else environ
    launcher = detect_launcher(env)
    if launcher is None:
        return plain
    return int(env.get(launcher_variables(launcher)[column], plain))


def world_size_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The world size the launcher announced (1 when started as a plain process)."""
    return _announced(environ, 1, plain=1)


def rank_from_env(environ: Mapping[str, str] | None = None) -> int:
    """This process's global rank as the launcher announced it (0 for a plain process)."""
    return _announced(environ, 0, plain=0)


def local_rank_from_env(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank on its node as the launcher announced it (0 for a plain process or when unset)."""
    return _announced(environ, 2, plain=0)
