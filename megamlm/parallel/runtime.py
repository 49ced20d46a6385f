"""Join the launcher's process group and build the DeviceMesh of a layout (nothing to join for one process)."""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from megamlm.log import log
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.launch import init_distributed


def start_parallel(dims: ParallelDims, device: torch.device,
                   timeout_minutes: float = 30.0) -> tuple[DeviceMesh | None, torch.device]:
    """(mesh, this rank's device); a single process gets no mesh and keeps ``device``. The start-up checks found
    the launcher's world to be the one ``dims`` was planned for (megamlm/training/startup.py). ``timeout_minutes``
    (--distributed-timeout-minutes) bounds every collective's wait for a peer that went silent."""
    if not dims.is_parallel:
        return None, device
    _, _, local_rank = init_distributed(device.type, timeout_minutes)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
    mesh = dims.build_mesh(device.type)
    log(f"parallel layout: {dims.describe()}")
    # Logged because it decides how long a dropped link or a hung node holds the allocation before the run fails.
    log(f"distributed timeout: {timeout_minutes:g} minutes (--distributed-timeout-minutes)")
    return mesh, device


def stop_parallel() -> None:
    """Leave the process group at the end of a run: together (a barrier, so that no rank tears down while a peer is
    still in a collective with it), then every process group object freed while the interpreter is whole.

    ``destroy_process_group`` only forgets the groups: a DeviceMesh held in a reference cycle (a parallelized model's
    DTensors and hooks) keeps them alive until the interpreter's own teardown, and a gloo group destructed there,
    with its peer already gone, aborts the process ("terminate called without an active exception"). A two-node
    study job that had saved and logged "done" failed so under SLURM (issue 46). Measured with torchrun, 2 ranks, a
    mesh kept past destroy and one rank exiting a second after the other: 5 of 24 launches aborted; with the
    ``gc.collect()`` below, 0 of 40 (tests/distributed/test_teardown.py checks that no group outlives this)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
