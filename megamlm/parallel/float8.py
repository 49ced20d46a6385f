"""float8 training of the transformer blocks' linear layers (``--fp8``), through torchao.

Each block's q/k/v/o and gate/up/down projections become torchao ``Float8Linear`` modules: the inputs, the
weights and the output gradients are cast to float8 with one dynamic scale per tensor before each matmul
(e4m3 forward, e5m2 for gradients), and the master weights, the optimizer and everything else keep their
precision. The embedding, the norms and the LM head (with its 128k-row softmax) are not converted. Parameter
names do not change, so checkpoints are interchangeable with bf16 runs.

torchao's float8 linear composes with FSDP2 (the bf16 weight shards are gathered, then cast), DDP,
activation checkpointing and ``torch.compile`` (which fuses the casts); it is applied before all of them.
Tensor parallelism would need torchao's float8 tensor-parallel styles, which are not wired in: ``--fp8``
with ``--tp`` is refused. torchao is an optional extra, imported only here.
"""

from __future__ import annotations

import torch.nn as nn

from megamlm import extras
from megamlm.parallel.dims import ParallelDims

# float8 matmuls (torch._scaled_mm) need both matrix dimensions of the weight divisible by 16.
_FP8_ALIGNMENT = 16


def float8_problem(dims: ParallelDims) -> str | None:
    """Why ``--fp8`` cannot run in this layout or installation, in one line naming the fix; None when it can.
    (The start-up checks raise it and ``float8_width_problem``, megamlm/training/startup.py.)"""
    if not extras.installed("torchao"):
        return extras.missing_message("torchao", "--fp8") + ", or drop --fp8"
    if dims.tp > 1:
        return ("--fp8 with --tp > 1 is not supported (torchao's float8 tensor-parallel layouts are not "
                "wired in); use --tp 1 with FSDP2 data parallelism, or drop --fp8")
    return None


def float8_linear_names(model: nn.Module) -> list[str]:
    """The linear layers ``apply_float8`` converts: every block's projections (not the LM head)."""
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.startswith("layers.")]


def float8_width_problem(model: nn.Module) -> str | None:
    """Why float8 matmuls cannot take the linear layers of ``model`` (built on any device, ``meta`` included);
    None when they can."""
    names = float8_linear_names(model)
    misaligned = [f"{n} ({m.in_features} -> {m.out_features})" for n, m in model.named_modules()
                  if n in names and (m.in_features % _FP8_ALIGNMENT or m.out_features % _FP8_ALIGNMENT)]
    if misaligned:
        return (f"--fp8 needs linear layers whose widths are multiples of {_FP8_ALIGNMENT}; these are "
                f"not: {', '.join(misaligned[:3])}; change --hidden-size / --ffn-hidden-size or drop --fp8")
    return None


def apply_float8(model: nn.Module, dims: ParallelDims) -> list[str]:
    """Convert the blocks' linear layers of ``model`` to float8 training in place; returns their names. What the
    start-up checks refuse is a ValueError here: a caller that skipped them."""
    if problem := float8_problem(dims) or float8_width_problem(model):
        raise ValueError(problem)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    names = float8_linear_names(model)
    convert_to_float8_training(model, config=Float8LinearConfig(),
                               module_filter_fn=lambda module, fqn: fqn in names)
    return names
