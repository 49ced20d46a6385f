"""Pure-PyTorch references for the hot paths.

Every fused kernel in this package has the same signature as its reference here, and tests compare
the two. The model calls these through ``megamlm.kernels`` (the dispatch point), never directly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32 and cast back to ``x.dtype`` (Llama convention)."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, "rotate half" layout (Llama/EuroBERT/Megatron non-interleaved).

    x: (batch, seq, heads, head_dim); cos, sin: (seq, head_dim) with the frequencies repeated twice, or (batch,
    seq, head_dim): each token's own position (position ids).
    """
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos = (cos[None] if cos.dim() == 2 else cos)[:, :, None, :].to(x.dtype)
    sin = (sin[None] if sin.dim() == 2 else sin)[:, :, None, :].to(x.dtype)
    return x * cos + rotated * sin


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation: silu(gate) * up."""
    return F.silu(gate) * up


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """GeGLU activation with tanh-approximated GELU (Gemma's gelu_pytorch_tanh): gelu(gate) * up."""
    return F.gelu(gate, approximate="tanh") * up


def geglu_erf(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """GeGLU activation with the exact (erf) GELU (ModernBERT's): gelu(gate) * up."""
    return F.gelu(gate) * up


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_size: int = 0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum of token cross-entropies of ``hidden @ weight.T (+ bias)`` against ``targets``.

    hidden: (N, H); weight: (V, H); targets: (N,) with ``ignore_index`` for positions without a loss.
    Returns the *sum* over non-ignored positions in fp32 (callers divide by their own token count,
    which keeps gradient accumulation and data parallelism exact). ``chunk_size`` is accepted for
    signature parity with the fused kernel; the reference materialises all logits.
    """
    logits = (hidden @ weight.t() if bias is None else F.linear(hidden, weight, bias)).float()
    return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="sum")
