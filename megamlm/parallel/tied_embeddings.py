"""Tied input and output embeddings (``ModelArgs.tie_word_embeddings``) kept tied in every layout.

In one process (and under TP or FSDP without a pipeline) the LM head's weight *is* the embedding's parameter;
sharding a module replaces its parameter, so the tie is restored after each such step (``retie``).

With a pipeline the embedding lives on the first stage and the LM head on the last, in different processes:
each holds a copy of the one matrix, both start equal (the full model is built from one seed, or loaded from
one checkpoint), and after every backward their gradients are summed over the two ranks (``sync_gradients``),
so both copies take the same optimizer step, as Megatron does with its embedding group. The last stage keeps
its copy under the name ``embed_tokens.weight`` too (the embedding module is kept but not run there), so
checkpoints name the matrix and its optimizer state the same way in every layout and resume across layouts.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from megamlm.model.transformer import Transformer


def is_tied(model: Transformer) -> bool:
    return model.args.tie_word_embeddings


def retie(model: Transformer, source: str = "embed_tokens") -> None:
    """Point the embedding and the LM head of ``model`` at one parameter, the one ``source`` holds now."""
    if not is_tied(model) or model.embed_tokens is None or model.lm_head is None:
        return
    if source == "embed_tokens":
        model.lm_head.weight = model.embed_tokens.weight
    else:
        model.embed_tokens.weight = model.lm_head.weight


def embedding_group(model: Transformer, mesh: DeviceMesh | None, pp: int):
    """The process group of the first and last pipeline rank holding this rank's shard of the tied matrix
    (same data-parallel and tensor-parallel coordinates), or None where there is nothing to synchronise.

    Every rank must call this (group creation is collective), in the same order.
    """
    if not is_tied(model) or mesh is None or pp == 1:
        return None
    ranks = mesh.mesh  # (pp, dp_replicate, dp_shard, tp) -> global rank
    mine = None
    for position in itertools.product(*(range(n) for n in ranks.shape[1:])):
        members = [int(ranks[(0, *position)]), int(ranks[(pp - 1, *position)])]
        group = dist.new_group(members)
        if dist.get_rank() in members:
            mine = group
    return mine


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@torch.no_grad()
def sync_gradients(model: Transformer, group) -> None:
    """Sum the tied matrix's gradient over the first and last pipeline stage (its two copies)."""
    if group is None:
        return
    weight = (model.embed_tokens if model.embed_tokens is not None else model.lm_head).weight
    if weight.grad is None:  # both ranks must take part in the all-reduce
        weight.grad = torch.zeros_like(weight)
    if isinstance(weight.grad, DTensor) and weight.grad.placements != weight.placements:
        # Under TP the embedding's backward leaves a replicated gradient; the LM head's is sharded like the weight.
        weight.grad = weight.grad.redistribute(placements=weight.placements)
    dist.all_reduce(_local(weight.grad), group=group)
