"""Held-out MLM, MNTP and CLM loss of one model outside a run (no parallel layout): the objectives' own batches
(``objectives.batch.make_batch``) on fixed windows of held-out tokens, masked as a run's validation masks them
(window k draws its mask from sample id ``VALIDATION_MASK_ID_BASE + k`` and the seed), so every model scored on
the same windows and seed sees the same masks. MLM and MNTP run bidirectionally, CLM causally; the loss is the
mean over the predicted tokens (sparse prediction, as in training)."""

from __future__ import annotations

import numpy as np
import torch

from megamlm.objectives import MaskingSpec
from megamlm.objectives.batch import make_batch
from megamlm.objectives.loss import sparse_lm_loss
from megamlm.training.validation import VALIDATION_MASK_ID_BASE

OBJECTIVES = ("mlm", "mntp", "clm")


def token_windows(documents: list[list[int]], eos_id: int, seq_length: int, count: int) -> np.ndarray:
    """The first ``count`` windows of ``seq_length`` tokens of the documents joined with EOS after each."""
    stream = [t for doc in documents for t in (*doc, eos_id)]
    available = len(stream) // seq_length
    if available < count:
        raise ValueError(f"{len(stream)} held-out tokens make {available} windows of {seq_length}, not {count}")
    return np.asarray(stream[: count * seq_length], dtype=np.int64).reshape(count, seq_length)


def heldout_losses(model: torch.nn.Module, windows: np.ndarray, masking: MaskingSpec, seed: int,
                   batch_size: int = 8) -> dict[str, float]:
    """Mean loss per objective of ``model`` (a megamlm Transformer) over ``windows``."""
    totals = {objective: [0.0, 0] for objective in OBJECTIVES}
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            rows = windows[start:start + batch_size]
            ids = [VALIDATION_MASK_ID_BASE + k for k in range(start, start + len(rows))]
            for objective in OBJECTIVES:
                batch = make_batch(objective, rows, ids, seed, masking)
                hidden = model(batch.input_ids, causal=batch.causal)
                loss, predicted = sparse_lm_loss(hidden, model.lm_head.weight, batch.targets, model.backends.kernels,
                                                 batch.positions, model.head, model.lm_head.bias)
                totals[objective][0] += float(loss)
                totals[objective][1] += int(predicted)
    return {objective: total / max(count, 1) for objective, (total, count) in totals.items()}
