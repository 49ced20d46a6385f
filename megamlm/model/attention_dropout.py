"""Attention with dropout on its probabilities (ModernBERT's ``attention_dropout``), for training only.

The attention backends compute without dropout; a model with ``attention_dropout > 0`` in train mode takes this
path instead: torch's SDPA with ``dropout_p`` over the dense mask of the sdpa backend (causal, documents, window).
"""

from __future__ import annotations

import torch

from megamlm.model.attention_backends import dense_document_mask, sdpa, window_mask


def attention_mask(seq: int, causal: bool, document_ids: torch.Tensor | None, window: int | None,
                   device) -> torch.Tensor | None:
    """Boolean (1 or batch, 1, seq, seq) mask, True where a query may attend; None: everywhere."""
    if window is not None:
        return window_mask(seq, window, causal, document_ids, device)
    if document_ids is not None:
        return dense_document_mask(document_ids, causal)
    if causal:
        return torch.ones(seq, seq, dtype=torch.bool, device=device).tril()[None, None]
    return None


def dropout_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      scale: float | None, p: float) -> torch.Tensor:
    """(batch, seq, heads, dim) in and out; probabilities dropped with probability ``p`` (torch's SDPA and RNG)."""
    return sdpa(q, k, v, attn_mask=mask, causal=False, scale=scale, dropout_p=p)
