"""The model's attention call; the backend is chosen once per run with ``set_attention_backend``."""

from __future__ import annotations

import torch

from megamlm.model import attention_backends

_backend = "sdpa"


def set_attention_backend(name: str) -> None:
    """sdpa, flex or flash (see megamlm.model.attention_backends)."""
    global _backend
    if name not in attention_backends.ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of "
                         f"{', '.join(attention_backends.ATTENTION_BACKENDS)}")
    _backend = name


def get_attention_backend() -> str:
    return _backend


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """q (batch, seq, heads, dim), k/v (batch, seq, kv_heads, dim) -> (batch, seq, heads, dim)."""
    return attention_backends.attention(q, k, v, causal=causal, document_ids=document_ids, backend=_backend)
