"""The language-modelling loss with sparse prediction: the LM head only sees positions with a target."""

from __future__ import annotations

import torch

from megamlm import kernels
from megamlm.objectives.masking import IGNORE_INDEX


def sparse_lm_loss(hidden: torch.Tensor, head_weight: torch.Tensor, targets: torch.Tensor,
                   kernel_backend: str = "auto") -> tuple[torch.Tensor, int]:
    """hidden (batch, seq, H), targets (batch, seq) -> (sum of token losses in fp32, number of predicted tokens).

    Under MLM only the selected 20-50% of positions reach the LM head; under CLM all but the last.
    ``kernel_backend`` picks the fused cross-entropy (see ``megamlm.kernels``): pass ``model.backends.kernels``.
    """
    flat_targets = targets.reshape(-1)
    keep = flat_targets != IGNORE_INDEX
    selected_hidden = hidden.reshape(-1, hidden.shape[-1])[keep]
    return kernels.linear_cross_entropy(selected_hidden, head_weight, flat_targets[keep],
                                        backend=kernel_backend), int(keep.sum())
