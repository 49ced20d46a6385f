"""The Batch: one micro-batch as the model and loss see it, and how one objective makes it from tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from megamlm.objectives.loss import predicted_positions
from megamlm.objectives.masking import MaskingSpec, clm_targets, mlm_mask, mntp_targets


@dataclass
class Batch:
    """One micro-batch as the model and loss see it."""

    input_ids: torch.Tensor
    targets: torch.Tensor
    positions: torch.Tensor
    """The flat indices of the predicted tokens, ascending (``predicted_positions`` of ``targets``), computed on the
    host: the loss selects the LM head's rows by them, so the device never has to tell the host how many there are."""
    causal: bool
    sample_ids: list[int]
    document_ids: torch.Tensor | None = None


def make_batch(objective: str, tokens: np.ndarray, sample_ids: list[int], seed: int, masking: MaskingSpec,
               document_ids: np.ndarray | None = None) -> Batch:
    """tokens (micro_batch, seq) -> the Batch of one objective ("mlm", "mntp": masks keyed by (seed, sample id))."""
    if objective == "mlm":
        pairs = [mlm_mask(row, sid, seed, masking) for row, sid in zip(tokens, sample_ids)]
    elif objective == "mntp":
        rows = document_ids if document_ids is not None else [None] * len(sample_ids)
        pairs = [mntp_targets(row, sid, seed, masking, docs) for row, sid, docs in zip(tokens, sample_ids, rows)]
    else:
        pairs = [clm_targets(row) for row in tokens]
    inputs = torch.from_numpy(np.stack([p[0] for p in pairs]))
    targets = torch.from_numpy(np.stack([p[1] for p in pairs]))
    docs = torch.from_numpy(np.asarray(document_ids)) if document_ids is not None else None
    return Batch(inputs, targets, predicted_positions(targets), causal=(objective == "clm"),
                 sample_ids=list(sample_ids), document_ids=docs)
