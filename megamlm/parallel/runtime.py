"""What the trainer needs from a parallel layout: start the process group, wrap the model, pick the step.

A single-process run (world size 1, the default) never reaches this module's process-group code and
keeps the plain ``train_step``; ``start_parallel`` returns None for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from megamlm.config import Config, ConfigError, parallel_dims
from megamlm.log import log
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.launch import init_distributed
from megamlm.parallel.parallelize import ParallelModel, parallelize
from megamlm.parallel.step import parallel_train_step


@dataclass
class ParallelRun:
    dims: ParallelDims
    mesh: object
    device: torch.device
    pm: ParallelModel | None = None

    def parallelize(self, model: torch.nn.Module, precision: str, recompute: bool,
                    compile_blocks: bool = False) -> torch.nn.Module:
        """Shard the full model in place; returns this rank's modules under their original names."""
        self.pm = parallelize(model, self.dims, self.mesh, self.device, precision, recompute, compile_blocks)
        return self.pm.model

    @property
    def dp_rank(self) -> int:
        """This rank's position among the data-parallel ranks (the slice of each global batch it computes)."""
        return self.mesh["dp_replicate"].get_local_rank() * self.dims.dp_shard + self.mesh["dp_shard"].get_local_rank()

    @property
    def dp_size(self) -> int:
        return self.dims.dp

    @property
    def group(self):
        return dist.group.WORLD

    def train_step(self, model, optimizer, micro_batches, lr, clip_grad, device, precision="auto"):
        """Same signature as ``megamlm.training.step.train_step``; runs this rank's share of the step."""
        return parallel_train_step(self.pm, optimizer, micro_batches, lr, clip_grad, device, precision)

    def train(self) -> None:
        for part in self.pm.parts:
            part.train()


def start_parallel(cfg: Config, device: torch.device) -> ParallelRun | None:
    """Join the launcher's process group and build the DeviceMesh; None for a single-process run."""
    dims = parallel_dims(cfg)
    if not dims.is_parallel:
        return None
    _, world, local_rank = init_distributed(device.type)
    if world != dims.world_size:
        raise ConfigError(f"the launcher started {world} processes but the layout was planned for {dims.world_size}")
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
    mesh = dims.build_mesh(device.type)
    log(f"parallel layout: {dims.describe()}")
    return ParallelRun(dims=dims, mesh=mesh, device=device)
