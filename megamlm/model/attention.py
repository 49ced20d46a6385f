"""Attention entry point used by the model; the backend is chosen once per run (see set_attention_backend)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """q (batch, seq, heads, dim), k/v (batch, seq, kv_heads, dim) -> (batch, seq, heads, dim)."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return out.transpose(1, 2)
