"""SwiGLU activation ``silu(gate) * up`` in Triton, forward and backward, computed in fp32.

gate and up are usually the two halves of one fused projection, i.e. strided views; they are read
through their row stride instead of being copied.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024


@triton.jit
def _swiglu_fwd_kernel(
    gate_ptr, up_ptr, out_ptr, n_cols, gate_row_stride, up_row_stride, out_row_stride,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(
    dy_ptr, gate_ptr, up_ptr, dgate_ptr, dup_ptr, n_cols,
    dy_row_stride, gate_row_stride, up_row_stride, dgate_row_stride, dup_row_stride,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    silu = g * sig
    dgate = dy * u * sig * (1.0 + g * (1.0 - sig))
    dup = dy * silu
    tl.store(dgate_ptr + row * dgate_row_stride + cols, dgate.to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + row * dup_row_stride + cols, dup.to(dup_ptr.dtype.element_ty), mask=mask)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D (rows, cols) view with a unit column stride, copying only if no such view exists."""
    if t.dim() == 0:
        t = t.reshape(1)
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(-1, t.shape[-1])


def _grid(rows: torch.Tensor):
    return (rows.shape[0], triton.cdiv(rows.shape[1], _BLOCK))


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        g, u = _as_rows(gate), _as_rows(up)
        out = torch.empty(g.shape, dtype=torch.promote_types(gate.dtype, up.dtype), device=gate.device)
        if out.numel():
            _swiglu_fwd_kernel[_grid(g)](
                g, u, out, g.shape[1], g.stride(0), u.stride(0), out.stride(0), BLOCK=_BLOCK
            )
        ctx.save_for_backward(g, u)
        ctx.shape = gate.shape
        return out.view(gate.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        g, u = ctx.saved_tensors
        d = _as_rows(dy)
        dgate = torch.empty(g.shape, dtype=g.dtype, device=g.device)
        dup = torch.empty(u.shape, dtype=u.dtype, device=u.device)
        if dgate.numel():
            _swiglu_bwd_kernel[_grid(g)](
                d, g, u, dgate, dup, g.shape[1],
                d.stride(0), g.stride(0), u.stride(0), dgate.stride(0), dup.stride(0), BLOCK=_BLOCK,
            )
        return dgate.view(ctx.shape), dup.view(ctx.shape)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Triton SwiGLU; same signature and semantics as ``reference.swiglu`` (no broadcasting)."""
    if gate.shape != up.shape:
        raise ValueError(
            f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have the same shape"
        )
    return SwiGLUFunction.apply(gate, up)
