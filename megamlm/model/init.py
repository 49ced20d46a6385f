"""Weight init of a built Transformer: Megatron's normal init, or ModernBERT's truncated normal.

Both fill norms with 1 and biases with 0. Megatron: N(0, std) for matrices, the output projections (o_proj,
down_proj) with std / sqrt(2 * layers). ModernBERT (transformers' ``ModernBertPreTrainedModel._init_weights``):
a normal cut at ``initializer_cutoff_factor`` stds, with std for the embedding and the input projections and
std / sqrt(2 * layers) for the output projections, the prediction head's dense layer and an untied LM head.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from megamlm.model.config import ModelArgs

_OUTPUT_PROJECTIONS = ("o_proj.weight", "down_proj.weight")
_MODERNBERT_OUT = (*_OUTPUT_PROJECTIONS, "head.dense.weight", "lm_head.weight")
"""The matrices ModernBERT initialises with its "out" std (its Wo, prediction head and decoder)."""


def param_role(name: str) -> str:
    """``one`` (a norm's weight), ``zero`` (a bias) or ``matrix``."""
    if name.endswith("norm.weight"):
        return "one"
    if name.endswith(".bias"):
        return "zero"
    return "matrix"


@torch.no_grad()
def init_weights(model: nn.Module, args: ModelArgs, generator: torch.Generator | None = None) -> None:
    """Initialise every parameter of ``model`` (a Transformer) in place as ``args.init_method`` says."""
    std = args.init_method_std
    out_std = std / math.sqrt(2.0 * args.num_layers)
    modernbert = args.init_method == "modernbert"
    out_names = _MODERNBERT_OUT if modernbert else _OUTPUT_PROJECTIONS
    cutoff = args.initializer_cutoff_factor
    for name, p in model.named_parameters():
        role = param_role(name)
        if role == "one":
            p.fill_(1.0)
        elif role == "zero":
            p.zero_()
        else:
            s = out_std if name.endswith(out_names) else std
            if modernbert:
                nn.init.trunc_normal_(p, 0.0, s, -cutoff * s, cutoff * s, generator=generator)
            else:
                p.normal_(0.0, s, generator=generator)
