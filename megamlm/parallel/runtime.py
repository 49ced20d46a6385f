"""Join the launcher's process group and build the DeviceMesh of a layout (nothing to join for one process)."""

from __future__ import annotations

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
    """Leave the process group at the end of a run (the launcher's processes then exit without a teardown race)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
