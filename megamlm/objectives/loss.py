"""The language-modelling loss with sparse prediction: the LM head only sees positions with a target."""

from __future__ import annotations

import torch
import torch.nn as nn

from megamlm import kernels
from megamlm.objectives.masking import IGNORE_INDEX


def sparse_lm_loss(hidden: torch.Tensor, head_weight: torch.Tensor, targets: torch.Tensor,
                   kernel_backend: str = "auto", positions: torch.Tensor | None = None,
                   prediction_head: nn.Module | None = None,
                   bias: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """hidden (batch, seq, H), targets (batch, seq) -> (sum of token losses in fp32, number of predicted tokens).

    Under MLM only the selected 20-50% of positions reach the LM head; under CLM all but the last.
    ``kernel_backend`` picks the fused cross-entropy (see ``megamlm.kernels``): pass ``model.backends.kernels``.
    ``positions``: the flat indices of the predicted tokens, ascending, when the caller has them (``predicted
    _positions`` of the host's targets): the device then never has to tell the host how many rows it selected.
    ``prediction_head`` (the model's ``head``, ModernBERT's) runs on the selected rows only, before the LM head;
    ``bias`` is the LM head's (``lm_head.bias``) where it has one.
    """
    rows, row_targets, predicted = select_predicted(hidden, targets, positions)
    if prediction_head is not None:
        rows = prediction_head(rows)
    return kernels.linear_cross_entropy(rows, head_weight, row_targets, backend=kernel_backend, bias=bias), predicted


def select_predicted(hidden: torch.Tensor, targets: torch.Tensor,
                     positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(hidden rows, their targets, how many) of the predicted tokens; by ``positions`` when given (no host
    synchronisation), else by a boolean selection (the host reads its size)."""
    flat_targets = targets.reshape(-1)
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    if positions is None:
        keep = flat_targets != IGNORE_INDEX
        return flat_hidden[keep], flat_targets[keep], int(keep.sum())
    return flat_hidden.index_select(0, positions), flat_targets.index_select(0, positions), positions.numel()


def predicted_positions(targets: torch.Tensor) -> torch.Tensor:
    """The flat indices of ``targets``' predicted tokens, ascending (what a boolean selection keeps)."""
    return (targets.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
