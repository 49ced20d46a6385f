"""The norms of a model: RMSNorm (Llama, EuroBERT) or LayerNorm with or without a bias (ModernBERT).

``build_norm`` picks one from ``ModelArgs.norm_type``; every norm of a model (block norms, final norm, embedding
norm, prediction head norm) is the same kind. Query/key norms stay RMSNorm (the families that have them use it).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from megamlm import kernels
from megamlm.model.config import Backends, ModelArgs

# The default backends (sdpa attention, auto kernels), built once: Backends is frozen, so one instance is shared.
DEFAULT_BACKENDS = Backends()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, backends: Backends = DEFAULT_BACKENDS):
        super().__init__()
        self.eps = eps
        self.backends = backends
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps, backend=self.backends.kernels)


class LayerNorm(nn.Module):
    """LayerNorm over the last dim (``weight``, and ``bias`` when it has one: ModernBERT's has none)."""

    def __init__(self, dim: int, eps: float, bias: bool):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def build_norm(args: ModelArgs, backends: Backends = DEFAULT_BACKENDS) -> nn.Module:
    """A hidden-size norm of the kind ``args.norm_type`` names."""
    if args.norm_type == "layernorm":
        return LayerNorm(args.hidden_size, args.norm_epsilon, args.norm_bias)
    return RMSNorm(args.hidden_size, args.norm_epsilon, backends)
