"""ParallelDims: the layout of a run (pp x dp_replicate x dp_shard x tp) and its DeviceMesh.

The layout is resolved and checked from the config and the world size alone, before any process
group exists, so a bad layout fails in one line on a laptop as it would on 64 GPUs. Rank order
follows Megatron/torchtitan: tensor parallel fastest (neighbouring ranks, same node), then the
data-parallel shard and replica dimensions, pipeline slowest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, get_args

from torch.distributed.device_mesh import init_device_mesh

from megamlm.config import (
    Config,
    DataParallelImpl,
    ParallelConfig,
    PipelineSchedule,
    TrainingConfig,
    launch_world_size,
    resolved_shape,
)
from megamlm.errors import UserError

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")


class LayoutError(UserError, ValueError):
    """An impossible parallel layout; the message names the fix."""


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

    def build_mesh(self, device_type: str):
        """The 4-d DeviceMesh (pp, dp_replicate, dp_shard, tp) over the default process group."""
        return init_device_mesh(device_type, (self.pp, self.dp_replicate, self.dp_shard, self.tp),
                                mesh_dim_names=MESH_DIMS)


def resolve_parallel_dims(world_size: int, parallel: ParallelConfig, training: TrainingConfig,
                          shape: Mapping[str, int | None]) -> ParallelDims:
    """Check the layout ``parallel`` asks for against the world size, the batch sizes of ``training`` and the model
    ``shape`` (by flag name, as ``megamlm.config.resolved_shape`` gives it; ``vocab_size`` None: tokenizer-sized,
    padded to a multiple of TP later); raise LayoutError naming the fix.

    ``dp_shard = -1`` takes whatever the other degrees leave of the world.
    """
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    dp_replicate, dp_shard = parallel.dp_replicate, parallel.dp_shard
    data_parallel_impl, pipeline_schedule = parallel.data_parallel_impl, parallel.pipeline_schedule
    num_layers_per_virtual_stage = parallel.num_layers_per_virtual_stage
    micro_batch_size, global_batch_size = training.micro_batch_size, training.global_batch_size
    num_layers = shape["num_layers"]
    if world_size < 1:
        raise LayoutError(f"world size must be positive, got {world_size}")
    for flag, value in (("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp),
                        ("--dp-replicate", dp_replicate)):
        if value < 1:
            raise LayoutError(f"{flag} must be >= 1, got {value}")
    if dp_shard == 0 or dp_shard < -1:
        raise LayoutError(f"--dp-shard must be >= 1, or -1 for the rest of the world; got {dp_shard}")
    for flag, value, choices in (("--data-parallel-impl", data_parallel_impl, get_args(DataParallelImpl)),
                                 ("--pipeline-schedule", pipeline_schedule, get_args(PipelineSchedule))):
        if value not in choices:
            raise LayoutError(f"unknown {flag} {value!r}; choose one of {', '.join(choices)}")

    if world_size % (tp * pp):
        raise LayoutError(f"world size {world_size} is not divisible by TP {tp} x PP {pp}; launch a multiple of "
                          f"{tp * pp} processes or change --tp/--pp")
    dp = world_size // (tp * pp)
    if data_parallel_impl == "ddp":
        if dp_shard not in (-1, 1):
            raise LayoutError("--dp-shard sets FSDP's sharding degree; with --data-parallel-impl ddp every "
                              "data-parallel rank holds a full replica: drop --dp-shard or use fsdp")
        if dp_replicate not in (1, dp):
            raise LayoutError(f"with --data-parallel-impl ddp all {dp} data-parallel ranks are replicas; "
                              f"drop --dp-replicate or set it to {dp}")
        if tp > 1:
            raise LayoutError("DDP does not compose with tensor parallelism here; use --data-parallel-impl fsdp "
                              "(FSDP2 shards over the data-parallel ranks and keeps TP's DTensors)")
        dp_replicate, dp_shard = dp, 1
    else:
        if dp % dp_replicate:
            raise LayoutError(f"--dp-replicate {dp_replicate} does not divide the data-parallel size {dp} "
                              f"(world {world_size} / (TP {tp} x PP {pp})); pick a divisor of {dp}")
        if dp_shard == -1:
            dp_shard = dp // dp_replicate
        if dp_replicate * dp_shard != dp:
            raise LayoutError(f"--dp-replicate {dp_replicate} x --dp-shard {dp_shard} = {dp_replicate * dp_shard} "
                              f"but world {world_size} / (TP {tp} x PP {pp}) leaves {dp} data-parallel ranks; "
                              "make the product match or pass --dp-shard -1")

    if tp > 1:
        for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size", "seq_length"):
            if shape[name] % tp:
                raise LayoutError(f"--{name.replace('_', '-')} {shape[name]} is not divisible by "
                                  f"--tensor-model-parallel-size {tp}; tensor parallelism splits it evenly: pick a TP "
                                  "size that divides it")
        vocab_size = shape["vocab_size"]
        if vocab_size is not None and vocab_size % tp:
            raise LayoutError(f"--vocab-size {vocab_size} is not divisible by --tensor-model-parallel-size {tp}; "
                              f"pad it to a multiple of {128 * tp} (128 x TP)")

    stages_per_rank = 1
    if pp > 1:
        if pipeline_schedule == "1f1b":
            if num_layers_per_virtual_stage is not None:
                raise LayoutError("--num-layers-per-virtual-stage is for --pipeline-schedule interleaved_1f1b; "
                                  "drop it or switch the schedule")
            if num_layers < pp:
                raise LayoutError(f"--num-layers {num_layers} is fewer than --pipeline-model-parallel-size {pp}; "
                                  "every pipeline stage needs at least one layer")
        else:
            if num_layers_per_virtual_stage is None or num_layers_per_virtual_stage < 1:
                raise LayoutError("--pipeline-schedule interleaved_1f1b needs --num-layers-per-virtual-stage N "
                                  "(layers in each virtual stage)")
            per_round = pp * num_layers_per_virtual_stage
            if num_layers % per_round or num_layers // per_round < 2:
                raise LayoutError(
                    f"--num-layers {num_layers} must be a multiple of PP {pp} x --num-layers-per-virtual-stage "
                    f"{num_layers_per_virtual_stage} giving at least 2 stages per rank for interleaved 1F1B; "
                    f"lower --num-layers-per-virtual-stage or use --pipeline-schedule 1f1b")
            stages_per_rank = num_layers // per_round
    elif num_layers_per_virtual_stage is not None or pipeline_schedule != "1f1b":
        raise LayoutError("--pipeline-schedule/--num-layers-per-virtual-stage need --pipeline-model-parallel-size > 1")

    if global_batch_size % (micro_batch_size * dp):
        raise LayoutError(f"--global-batch-size {global_batch_size} is not divisible by --micro-batch-size "
                          f"{micro_batch_size} x data-parallel size {dp}; use a multiple of {micro_batch_size * dp}")
    micro_batches = global_batch_size // (micro_batch_size * dp)
    if pp > 1 and micro_batches < pp:
        raise LayoutError(f"pipeline parallelism needs at least PP={pp} micro-batches per step per data-parallel "
                          f"rank, got {micro_batches} (global {global_batch_size} / (micro {micro_batch_size} x "
                          f"DP {dp})); raise --global-batch-size or lower --micro-batch-size")
    if pp > 1 and pipeline_schedule == "interleaved_1f1b" and micro_batches % pp:
        raise LayoutError(f"interleaved 1F1B runs micro-batches in rounds of PP={pp}; {micro_batches} micro-batches "
                          f"per step is not a multiple: make --global-batch-size / (--micro-batch-size x DP) a "
                          f"multiple of {pp}")
    return ParallelDims(world_size=world_size, tp=tp, pp=pp, dp_replicate=dp_replicate, dp_shard=dp_shard,
                        data_parallel_impl=data_parallel_impl, pipeline_schedule=pipeline_schedule,
                        stages_per_rank=stages_per_rank)


def dims_from_config(cfg: Config, world_size: int | None = None) -> ParallelDims:
    """The run's checked layout (world size: the argument, --world-size, else the launcher's environment).

    ``cfg`` is resolved (megamlm/config/resolve.py): its batch sizes are set, fitted to this layout where the user
    left them unset.
    """
    return resolve_parallel_dims(world_size or launch_world_size(cfg), cfg.parallel, cfg.training,
                                 resolved_shape(cfg.model))
