"""Apply a ParallelDims layout to a built single-device Transformer, in the fixed order:
pipeline split -> float8 linears -> TP -> activation checkpointing -> compile -> FSDP2/DDP.

One process is the trivial layout (one part, no mesh): it goes through the same function and comes out
as the same ``ParallelModel``, so the trainer has one code path for every layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh

from megamlm.model.transformer import Transformer
from megamlm.parallel.compile import apply_compile, resolve_compile_mode
from megamlm.parallel.data_parallel import (
    apply_ddp,
    apply_fsdp,
    apply_recompute,
    mixed_precision_policy,
)
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.float8 import apply_float8
from megamlm.parallel.pipeline_stages import (
    exchange_local_tensors,
    prune_to_stages,
    rank_stages,
    stage_copy,
)
from megamlm.parallel.tensor_parallel import apply_tp
from megamlm.parallel.tied_embeddings import embedding_group, retie


@dataclass
class ParallelModel:
    """One rank's share of the model.

    ``model`` holds every module this rank owns under its original name (optimizer, clipping, checkpoints);
    ``parts`` are what runs: the model itself (maybe FSDP/DDP-wrapped), or one pruned copy per pipeline stage.
    """

    model: Transformer
    parts: list[nn.Module]
    dims: ParallelDims
    mesh: DeviceMesh | None
    """None for a single process."""
    stage_ids: list[int] = field(default_factory=list)
    pipeline: object = None
    """The PipelineRunner, built on the first step (``parallel/pipeline.py``)."""
    embedding_group: object = None
    """Pipelines with tied embeddings: the group of the two ranks holding a copy of the matrix (else None)."""
    compile_mode: str = "none"
    """The torch.compile mode applied (``--compile`` resolved for this device and layout)."""
    float8_linears: list[str] = field(default_factory=list)
    """Names of the linear layers trained in float8 (``--fp8``)."""

    @property
    def tp_mesh(self) -> DeviceMesh | None:
        return self.mesh["tp"] if self.dims.tp > 1 else None

    @property
    def dp_rank(self) -> int:
        """This rank's position among the data-parallel ranks (the slice of each global batch it computes)."""
        if self.mesh is None:
            return 0
        return self.mesh["dp_replicate"].get_local_rank() * self.dims.dp_shard + self.mesh["dp_shard"].get_local_rank()

    @property
    def dp_size(self) -> int:
        return self.dims.dp

    @property
    def has_last_stage(self) -> bool:
        return self.dims.pp == 1 or self.dims.num_stages - 1 in self.stage_ids

    @property
    def has_first_stage(self) -> bool:
        return self.dims.pp == 1 or 0 in self.stage_ids

    def unique_parameters(self) -> list[torch.Tensor]:
        """This rank's parameters, without the last pipeline stage's copy of a tied embedding, so that a sum
        over every rank counts each weight once."""
        params = list(self.model.parameters())
        if self.embedding_group is not None and not self.has_first_stage:
            params = [p for p in params if p is not self.model.lm_head.weight]
        return params

    def train(self, mode: bool = True) -> None:
        for part in self.parts:
            part.train(mode)


def parallelize(model: Transformer, dims: ParallelDims, mesh: DeviceMesh | None, device: torch.device,
                precision: str = "auto", recompute: bool = False, compile: str = "none",
                fp8: bool = False) -> ParallelModel:
    """Turn the full model (same weights on every rank) into this rank's ParallelModel, in place.

    ``compile`` is a ``--compile`` mode (``auto`` resolved here for ``device`` and ``dims``, see
    ``megamlm.parallel.compile``); ``fp8`` trains the blocks' linear layers in float8 (``megamlm.parallel.float8``).
    """
    compile_mode = resolve_compile_mode(compile, device, dims)
    stage_ids: list[int] = []
    if dims.pp > 1:
        stage_ids = rank_stages(mesh["pp"].get_local_rank(), dims.pp, dims.stages_per_rank)
        prune_to_stages(model, stage_ids, dims.num_stages)
    float8_linears = apply_float8(model, dims) if fp8 else []
    tp_mesh = mesh["tp"] if dims.tp > 1 else None
    if tp_mesh is not None:
        apply_tp(model, tp_mesh)
    if recompute:
        apply_recompute(model)
    apply_compile(model, compile_mode)

    parts: list[nn.Module] = [model]
    if dims.pp > 1:
        parts = [stage_copy(model, s, dims.num_stages) for s in stage_ids]
        for part, s in zip(parts, stage_ids):
            exchange_local_tensors(part, s, dims.num_stages, tp_mesh)

    if dims.dp > 1:
        if dims.data_parallel_impl == "fsdp":
            dp_mesh = mesh["dp_replicate", "dp_shard"] if dims.dp_replicate > 1 else mesh["dp_shard"]
            policy = mixed_precision_policy(device, precision)
            # With PP a stage runs forward once per micro-batch; resharding in between would re-gather each time.
            reshard = dims.pp == 1
            parts = [apply_fsdp(part, list(part.layers.values()), dp_mesh, policy, reshard) for part in parts]
        else:
            dp_group = mesh["dp_replicate"].get_group()
            parts = [apply_ddp(part, dp_group) for part in parts]
        if dims.pp > 1:  # FSDP sharded the last stage's LM head; its kept embedding module takes that parameter
            retie(model, source="lm_head")
    # a tied embedding's two copies only need a group of their own where pipeline stages hold them apart
    tied_group = embedding_group(model, mesh, dims.pp) if dims.pp > 1 else None
    return ParallelModel(model=model, parts=parts, dims=dims, mesh=mesh, stage_ids=stage_ids,
                         embedding_group=tied_group, compile_mode=compile_mode, float8_linears=float8_linears)
