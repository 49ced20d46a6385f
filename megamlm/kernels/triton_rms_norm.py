"""RMSNorm in Triton, forward and backward, with the semantics of ``reference.rms_norm``.

The normalised row is rounded to ``x.dtype`` before the weight multiply and the output takes the
promoted dtype of ``x`` and ``weight`` (Llama convention, as in the reference). Imported only when
triton is importable (see ``megamlm.kernels``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Rows handled by one program in the backward pass; each program writes one partial weight gradient.
_ROWS_PER_BWD_PROGRAM = 32


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr,
    x_row_stride, y_row_stride, n_cols, eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    normed = (x32 * rstd).to(x.dtype)
    y = normed.to(tl.float32) * w.to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
    dy_row_stride, x_row_stride, dx_row_stride, n_rows, n_cols,
    ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
    first_row = pid * ROWS_PER_PROGRAM
    for i in range(ROWS_PER_PROGRAM):
        row = (first_row + i).to(tl.int64)
        if row < n_rows:
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
            dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x.to(tl.float32) * rstd
            # The weight sees the normalised row after its rounding to x.dtype, as in the reference.
            dw_acc += dy * x_hat.to(x.dtype).to(tl.float32)
            d_normed = dy * w
            dot = tl.sum(d_normed * x_hat, axis=0) / n_cols
            dx = rstd * (d_normed - x_hat * dot)
            tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_partial_ptr + pid * n_cols + cols, dw_acc, mask=mask)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D (rows, hidden) view with a unit stride on the last dim, copying only if needed."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(-1, t.shape[-1])


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = _as_rows(x)
        weight = weight.contiguous()
        n_rows, n_cols = rows.shape
        out_dtype = torch.promote_types(x.dtype, weight.dtype)
        y = torch.empty((n_rows, n_cols), dtype=out_dtype, device=x.device)
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(n_cols)
        if n_rows > 0:
            _rms_norm_fwd_kernel[(n_rows,)](
                rows, weight, y, rstd, rows.stride(0), y.stride(0), n_cols, eps, BLOCK=block,
                num_warps=_num_warps(block),
            )
        ctx.save_for_backward(rows, weight, rstd)
        ctx.x_shape = x.shape
        return y.view(*x.shape[:-1], n_cols)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        rows, weight, rstd = ctx.saved_tensors
        n_rows, n_cols = rows.shape
        dy_rows = _as_rows(dy)
        dx = torch.empty((n_rows, n_cols), dtype=rows.dtype, device=rows.device)
        n_programs = triton.cdiv(n_rows, _ROWS_PER_BWD_PROGRAM)
        dw_partial = torch.zeros((max(n_programs, 1), n_cols), dtype=torch.float32, device=rows.device)
        block = triton.next_power_of_2(n_cols)
        if n_rows > 0:
            _rms_norm_bwd_kernel[(n_programs,)](
                dy_rows, rows, weight, rstd, dx, dw_partial,
                dy_rows.stride(0), rows.stride(0), dx.stride(0), n_rows, n_cols,
                ROWS_PER_PROGRAM=_ROWS_PER_BWD_PROGRAM, BLOCK=block, num_warps=_num_warps(block),
            )
        dw = dw_partial.sum(0).to(weight.dtype)
        return dx.view(ctx.x_shape), dw, None


def _num_warps(block: int) -> int:
    return 4 if block <= 2048 else 8 if block <= 8192 else 16


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Triton RMSNorm over the last dim; same signature and semantics as ``reference.rms_norm``."""
    if weight.shape != (x.shape[-1],):
        raise ValueError(
            f"rms_norm: weight has shape {tuple(weight.shape)} but x's last dim is {x.shape[-1]}; "
            "pass a 1-D weight of the hidden size"
        )
    return RMSNormFunction.apply(x, weight, eps)
