"""Data parallelism (FSDP2 per block, hybrid sharding, or DDP) and activation checkpointing per block."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from megamlm.precision import uses_bf16


def apply_recompute(model: nn.Module) -> None:
    """Recompute each block's activations in the backward pass (``--recompute``).

    The wrapper's extra name level is stripped by torch's state-dict helpers, so checkpoints keep the
    plain ``layers.N....`` names.
    """
    for name, block in list(model.layers.items()):
        model.layers[name] = checkpoint_wrapper(block, preserve_rng_state=False)


def mixed_precision_policy(device: torch.device, precision: str) -> MixedPrecisionPolicy:
    """bf16 compute with fp32 gradient reduction on GPU (``auto``/``bf16``); fp32 throughout otherwise."""
    if uses_bf16(device, precision):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def apply_fsdp(root: nn.Module, blocks: list[nn.Module], dp_mesh, policy: MixedPrecisionPolicy,
               reshard_after_forward: bool = True) -> nn.Module:
    """``fully_shard`` each block, then ``root`` (which picks up the embedding, final norm and LM head).

    ``dp_mesh`` is 1-d (plain sharding) or 2-d (replicate, shard) for hybrid sharding. The root keeps its
    parameters gathered after forward (they are needed again at once in backward), which also lets the
    sparse loss read the gathered LM head weight outside the model's forward.
    """
    for block in blocks:
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(root, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)
    return root


def apply_ddp(module: nn.Module, dp_group) -> nn.Module:
    return DistributedDataParallel(module, process_group=dp_group)
