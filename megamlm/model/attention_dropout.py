"""Attention with dropout on its probabilities (ModernBERT's ``attention_dropout``), for training only.

The attention backends compute without dropout; a model with ``attention_dropout > 0`` in train mode takes this
path instead: softmax attention written out, with the masks of the sdpa backend (causal, documents, window) and
torch's dropout (its RNG), as transformers' eager attention does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from megamlm.model.attention_backends import dense_document_mask, window_mask


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
    """(batch, seq, heads, dim) in and out; probabilities dropped with probability ``p`` (torch's RNG)."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = F.dropout(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), p=p, training=True)
    return (probs @ v).transpose(1, 2)
