"""Tensor parallelism in Megatron's layout, as DTensor plans applied to a built model.

Per block: q/k/v and gate/up column-wise (each rank holds a slice of heads / of the MLP width),
o and down row-wise (their partial sums are reduce-scattered back onto the sequence), the two norms
sequence-parallel (each rank normalises its slice of the sequence). The embedding is
vocabulary-parallel (rows split over ranks), and the LM head is split the same way: the loss
computes logits for its own vocabulary slice only (see ``vocab_parallel_loss``).

Between modules the residual stream is a DTensor sharded on the sequence (Shard(1)).

Biases follow their weights: q/k/v (and MLP gate/up) biases are split with their heads (column-wise), the o_proj
(and down_proj) bias is kept whole on every rank and added once, to the reduced output (row-wise); the LM head's
bias is split over the vocabulary with its rows. A tied embedding and LM head both shard the vocabulary rows, so
they stay one DTensor parameter. ModernBERT's embedding norm is sequence-parallel like the other norms; its
prediction head is replicated (the loss runs it on the predicted rows, whole on every rank).
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from megamlm.parallel.tied_embeddings import retie


def block_plan(block: nn.Module | None = None) -> dict:
    """The TP plan of one block; the optional norms of ``block`` (q/k norms, sublayer output norms) join it."""
    # The attention module takes (x, cos, sin, causal, document_ids): only x is distributed.
    attention_inputs = (Shard(1), None, None, None, None)
    optional = {}
    if block is not None and block.self_attn.q_norm is not None:
        # Each rank holds a shard of the heads (dim 2 of (batch, seq, heads, head_dim)); the replicated head_dim
        # weight's gradient is summed over the ranks' heads by DTensor, as for the sequence-parallel norms.
        optional["self_attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        optional["self_attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
    if block is not None and block.attn_output_layernorm is not None:
        optional["attn_output_layernorm"] = SequenceParallel(use_local_output=False)
        optional["mlp_output_layernorm"] = SequenceParallel(use_local_output=False)
    if block is None or block.input_layernorm is not None:  # layer 0 after an embedding norm has none
        optional["input_layernorm"] = SequenceParallel()
    return {**optional,
        "self_attn": PrepareModuleInput(input_layouts=attention_inputs,
                                        desired_input_layouts=(Replicate(), None, None, None, None),
                                        use_local_output=True),
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                  use_local_output=True),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Shard a Transformer (or a pipeline stage of one) over ``tp_mesh`` in place.

    The model's forward then takes replicated token ids (or, on later pipeline stages, a sequence-sharded
    hidden DTensor) and returns the final hidden states as a DTensor sharded on the sequence.
    """
    top: dict = {}
    if model.embed_tokens is not None:
        top["embed_tokens"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False)
    if model.embed_norm is not None:
        top["embed_norm"] = SequenceParallel()
    if model.norm is not None:
        top["norm"] = SequenceParallel()
    if model.lm_head is not None:
        # Only shards the weight over the vocabulary for the loss; a dense `logits()` call gathers them.
        top["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    if top:
        parallelize_module(model, tp_mesh, top)
        # Both shard the vocabulary rows (Shard(0)) over the same mesh, so a tied pair shares one DTensor again.
        retie(model)
    if model.head is not None:
        # Replicated: the sparse loss runs it on the predicted rows, whole on every rank (vocab_parallel_loss).
        distribute_module(model.head, tp_mesh)
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, block_plan(block))
    return model
