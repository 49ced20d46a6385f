"""The Batch: one micro-batch as the model and loss see it, and how one objective makes it from tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from megamlm.objectives.loss import predicted_positions
from megamlm.objectives.masking import MaskingSpec, clm_targets, document_positions, mlm_mask, mntp_targets


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
    position_ids: torch.Tensor | None = None
    """RoPE positions (batch, seq) when they are not 0, 1, 2, ...: in a document sample mode they restart at each
    document (``masking.document_positions``); None: the row's own positions."""


def make_batch(objective: str, tokens: np.ndarray, sample_ids: list[int], seed: int, masking: MaskingSpec,
               document_ids: np.ndarray | None = None, whole_documents: bool = False) -> Batch:
    """tokens (micro_batch, seq) -> the Batch of one objective ("mlm", "mntp": masks keyed by (seed, sample id)).

    ``whole_documents``: the rows hold whole documents and padding (a document ``--sample-mode``, whose
    ``document_ids`` then must be given): no mask, target or prediction lands on padding or crosses a document, and
    RoPE positions restart at each document."""
    rows = document_ids if whole_documents else [None] * len(sample_ids)
    if objective == "mlm":
        pairs = [mlm_mask(row, sid, seed, masking, docs) for row, sid, docs in zip(tokens, sample_ids, rows)]
    elif objective == "mntp":
        rows = document_ids if document_ids is not None else rows
        pairs = [mntp_targets(row, sid, seed, masking, docs) for row, sid, docs in zip(tokens, sample_ids, rows)]
    else:
        pairs = [clm_targets(row, docs) for row, docs in zip(tokens, rows)]
    inputs = torch.from_numpy(np.stack([p[0] for p in pairs]))
    targets = torch.from_numpy(np.stack([p[1] for p in pairs]))
    docs = torch.from_numpy(np.asarray(document_ids)) if document_ids is not None else None
    positions = torch.from_numpy(document_positions(document_ids)) if whole_documents else None
    return Batch(inputs, targets, predicted_positions(targets), causal=(objective == "clm"),
                 sample_ids=list(sample_ids), document_ids=docs, position_ids=positions)
