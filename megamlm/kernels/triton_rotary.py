"""Rotary embedding in Triton ("rotate half" layout), forward and backward.

Same signature and semantics as ``reference.apply_rotary``: x (batch, seq, heads, head_dim),
cos/sin (seq, head_dim). With x = [x1, x2] split in halves along head_dim:

    out1 = x1 * cos1 - x2 * sin1        out2 = x2 * cos2 + x1 * sin2

The backward pass is the transpose of that linear map, so one kernel serves both directions:

    dx1 = dy1 * cos1 + dy2 * sin2       dx2 = dy2 * cos2 - dy1 * sin1

cos and sin are treated as constants (no gradient), as rotary tables are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(
    x_ptr, cos_ptr, sin_ptr, out_ptr,
    seq_len, n_heads, half,
    x_stride_b, x_stride_s, x_stride_h,
    out_stride_b, out_stride_s, out_stride_h,
    cs_stride_s,
    BACKWARD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program per (batch, position): all heads of that position share one row of cos/sin.
    pid = tl.program_id(0).to(tl.int64)
    b = pid // seq_len
    s = pid % seq_len
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    mask = (heads < n_heads) & (dims < half)
    dim_mask = dims < half

    cs_row = s * cs_stride_s
    cos1 = tl.load(cos_ptr + cs_row + dims, mask=dim_mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + cs_row + half + dims, mask=dim_mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + cs_row + dims, mask=dim_mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + cs_row + half + dims, mask=dim_mask, other=0.0).to(tl.float32)

    x_base = x_ptr + b * x_stride_b + s * x_stride_s + heads * x_stride_h
    x1 = tl.load(x_base + dims, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_base + half + dims, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        o1 = x1 * cos1 + x2 * sin2
        o2 = x2 * cos2 - x1 * sin1
    else:
        o1 = x1 * cos1 - x2 * sin1
        o2 = x2 * cos2 + x1 * sin2
    out_base = out_ptr + b * out_stride_b + s * out_stride_s + heads * out_stride_h
    tl.store(out_base + dims, o1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_base + half + dims, o2.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    batch, seq, heads, head_dim = x.shape
    out = torch.empty((batch, seq, heads, head_dim), dtype=x.dtype, device=x.device)
    half = head_dim // 2
    if x.numel() == 0:
        return out
    block_h = triton.next_power_of_2(heads)
    block_d = triton.next_power_of_2(half)
    _rotary_kernel[(batch * seq,)](
        x, cos, sin, out,
        seq, heads, half,
        x.stride(0), x.stride(1), x.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        cos.stride(0),
        BACKWARD=backward, BLOCK_H=block_h, BLOCK_D=block_d,
        num_warps=4 if block_h * block_d <= 4096 else 8,
    )
    return out


class RotaryFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _launch(x, cos, sin, backward=False)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _launch(dy, cos, sin, backward=True), None, None


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Triton rotary embedding; same signature and semantics as ``reference.apply_rotary``."""
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(
            f"apply_rotary: x must be (batch, seq, heads, head_dim) with an even head_dim, got {tuple(x.shape)}"
        )
    table_shape = (x.shape[1], x.shape[3])
    if cos.shape != table_shape or sin.shape != table_shape:
        raise ValueError(
            f"apply_rotary: cos/sin must be (seq, head_dim) = {table_shape}, got {tuple(cos.shape)} and "
            f"{tuple(sin.shape)}; slice the rotary tables to the sequence length first"
        )
    return RotaryFunction.apply(x, cos.contiguous(), sin.contiguous())
