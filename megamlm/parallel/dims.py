"""ParallelDims: the layout of a run (pp x dp_replicate x dp_shard x tp) and its DeviceMesh.

The layout is resolved from the config and the world size alone, before any process group exists; the start-up
check phase (megamlm/training/startup.py: ``resolve_parallel_dims``) refuses a bad one first, so it fails in one
line on a laptop as it would on 64 GPUs. This module holds the arithmetic. Rank order follows Megatron/torchtitan:
tensor parallel fastest (neighbouring ranks, same node), then the data-parallel shard and replica dimensions,
pipeline slowest.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import init_device_mesh

from megamlm.config import DataParallelImpl, ParallelConfig, PipelineSchedule

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")


@dataclass(frozen=True)
class ParallelDims:
    world_size: int
    tp: int = 1
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    data_parallel_impl: DataParallelImpl = "fsdp"
    pipeline_schedule: PipelineSchedule = "1f1b"
    stages_per_rank: int = 1
    """Virtual pipeline stages per pipeline rank (1 for 1F1B, >= 2 for interleaved 1F1B)."""

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def num_stages(self) -> int:
        return self.pp * self.stages_per_rank

    @property
    def is_parallel(self) -> bool:
        return self.world_size > 1

    def describe(self) -> str:
        parts = [f"world {self.world_size}", f"TP {self.tp}", f"PP {self.pp}"]
        if self.pp > 1:
            parts.append(f"{self.pipeline_schedule} ({self.num_stages} stages)")
        if self.data_parallel_impl == "fsdp":
            parts.append(f"DP {self.dp} (FSDP2: replicate {self.dp_replicate} x shard {self.dp_shard})")
        else:
            parts.append(f"DP {self.dp} (DDP)")
        return " | ".join(parts)

    @classmethod
    def of(cls, world_size: int, parallel: ParallelConfig, num_layers: int) -> ParallelDims:
        """The layout ``parallel`` asks for on ``world_size`` ranks of a ``num_layers``-layer model, once the start-up
        checks accepted it."""
        tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
        dp_replicate, dp_shard = data_parallel_degrees(world_size // (tp * pp), parallel)
        return cls(world_size=world_size, tp=tp, pp=pp, dp_replicate=dp_replicate, dp_shard=dp_shard,
                   data_parallel_impl=parallel.data_parallel_impl, pipeline_schedule=parallel.pipeline_schedule,
                   stages_per_rank=stages_per_rank(parallel, num_layers))

    def build_mesh(self, device_type: str):
        """The 4-d DeviceMesh (pp, dp_replicate, dp_shard, tp) over the default process group."""
        return init_device_mesh(device_type, (self.pp, self.dp_replicate, self.dp_shard, self.tp),
                                mesh_dim_names=MESH_DIMS)


def data_parallel_degrees(dp: int, parallel: ParallelConfig) -> tuple[int, int]:
    """(replicate, shard) degrees of ``dp`` data-parallel ranks: DDP's ranks are all replicas; FSDP's
    ``--dp-shard -1`` takes what ``--dp-replicate`` leaves."""
    if parallel.data_parallel_impl == "ddp":
        return dp, 1
    shard = dp // parallel.dp_replicate if parallel.dp_shard == -1 else parallel.dp_shard
    return parallel.dp_replicate, shard


def layers_per_round(parallel: ParallelConfig) -> int:
    """Interleaved 1F1B: the layers of one virtual stage on every pipeline rank."""
    return parallel.pipeline_model_parallel_size * parallel.num_layers_per_virtual_stage


def stages_per_rank(parallel: ParallelConfig, num_layers: int) -> int:
    """Virtual pipeline stages per pipeline rank: 1, or as many rounds of virtual stages as the layers fill."""
    if parallel.pipeline_model_parallel_size > 1 and parallel.pipeline_schedule == "interleaved_1f1b":
        return num_layers // layers_per_round(parallel)
    return 1
