"""Fused linear + cross-entropy: chunked matmuls in PyTorch, softmax/loss/gradient in one Triton kernel.

The kernel reads one chunk of logits row by row (an online max/sum-exp pass, then a pass that
writes ``softmax - onehot`` over the logits in place), so the chunk's gradient costs no extra memory
and the logits are read twice and written once. The chunk loop and the hidden/weight gradients are
``chunked_linear_cross_entropy``'s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from megamlm.kernels.chunked_linear_cross_entropy import chunked_linear_cross_entropy

_BLOCK_V = 4096


@triton.jit
def _cross_entropy_kernel(
    logits_ptr, targets_ptr, losses_ptr, logits_row_stride, n_cols, ignore_index,
    COMPUTE_GRAD: tl.constexpr, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * logits_row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    safe_target = tl.where(valid, target, 0)

    running_max = float("-inf")
    running_sum = 0.0
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, axis=0))
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        running_max = new_max
    lse = running_max + tl.log(running_sum)
    target_logit = tl.load(row_ptr + safe_target).to(tl.float32)
    tl.store(losses_ptr + row, tl.where(valid, lse - target_logit, 0.0))

    if COMPUTE_GRAD:
        scale = tl.where(valid, 1.0, 0.0)
        for start in range(0, n_cols, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)
            mask = cols < n_cols
            x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            grad = tl.exp(x - lse) - tl.where(cols == safe_target, 1.0, 0.0)
            tl.store(row_ptr + cols, (grad * scale).to(logits_ptr.dtype.element_ty), mask=mask)


def triton_chunk_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, compute_grad: bool
) -> torch.Tensor:
    """Per-row fp32 losses of one logits chunk; with ``compute_grad`` the logits become their gradient."""
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    if n_rows:
        if logits.stride(1) != 1:
            raise ValueError("triton cross-entropy needs logits with a unit column stride")
        block_v = min(_BLOCK_V, triton.next_power_of_2(n_cols))
        _cross_entropy_kernel[(n_rows,)](
            logits, targets.contiguous(), losses, logits.stride(0), n_cols, ignore_index,
            COMPUTE_GRAD=compute_grad, BLOCK_V=block_v, num_warps=8 if block_v >= 2048 else 4,
        )
    return losses


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_size: int = 0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Triton-fused linear + cross-entropy; same signature and result as the reference."""
    return chunked_linear_cross_entropy(
        hidden, weight, targets, ignore_index, chunk_size, chunk_ce=triton_chunk_cross_entropy, bias=bias
    )
