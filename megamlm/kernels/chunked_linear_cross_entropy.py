"""Linear + cross-entropy over row chunks, never holding the full (N, V) logits.

With a 128k vocabulary the LM head's logits dwarf every other activation (12 x 2048 tokens give
12.6 GB in fp32). Here the rows are processed ``chunk_size`` at a time: each chunk's logits are
computed, turned into per-row losses *and* (when gradients are wanted) into the gradient of the loss
sum w.r.t. those logits, which is immediately contracted into the gradients of ``hidden`` and
``weight``. The backward pass then only scales the stored gradients by the incoming grad. Peak extra
memory is one chunk of logits plus the gradients, which autograd would hold anyway.

The per-chunk softmax/cross-entropy is pluggable: ``torch_chunk_cross_entropy`` (pure PyTorch, any
device) here, and a Triton kernel in ``triton_cross_entropy``.
"""

from __future__ import annotations

from typing import Callable

import torch

# (logits (C, V), targets (C,), ignore_index, compute_grad) -> fp32 losses (C,); when compute_grad
# it overwrites ``logits`` in place with d(sum of losses)/d(logits) (zero rows for ignored targets).
ChunkCrossEntropy = Callable[[torch.Tensor, torch.Tensor, int, bool], torch.Tensor]

# Logits budget per chunk when chunk_size=0, counted at 4 bytes a logit. Each chunk rewrites the
# whole (V, H) fp32 weight gradient, so chunks must not be small. Measured with benchmarks/kernels.py
# (hidden 16384 x 1152, vocab 128,256, bf16, H200): 1024-row chunks 33.7 ms, 2093 rows 28.6 ms,
# 4096 rows 26.2 ms, 8192 rows 25.4 ms (4.6 GB), full-logits reference 44.9 ms (24 GB); 2 GiB gives
# 4186 rows at that vocabulary. On 2 CPU cores 128-row chunks were 1.5x slower than ~500-row ones.
_GPU_CHUNK_BYTES = 2 << 30
_CPU_CHUNK_BYTES = 256 << 20


def torch_chunk_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, compute_grad: bool
) -> torch.Tensor:
    """Per-row cross-entropy of one chunk in fp32; optionally its logits gradient, in place.

    With fp32 logits and a gradient wanted, the softmax is computed inside ``logits`` itself (shift, exp, divide):
    no second chunk-sized buffer, which on CPU also saves the page faults of a fresh large allocation per chunk.
    """
    valid = targets != ignore_index
    safe_targets = torch.where(valid, targets, torch.zeros_like(targets))[:, None]
    if not (compute_grad and logits.dtype == torch.float32):
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        losses = -log_probs.gather(1, safe_targets).squeeze(1)
        probs = log_probs.exp_() if compute_grad else None
    else:
        logits.sub_(logits.amax(dim=-1, keepdim=True))
        target_logits = logits.gather(1, safe_targets).squeeze(1)
        sum_exp = logits.exp_().sum(dim=-1)
        losses = sum_exp.log() - target_logits
        probs = logits.div_(sum_exp[:, None])
    losses.masked_fill_(~valid, 0.0)
    if compute_grad:
        probs.scatter_add_(1, safe_targets, torch.full_like(losses[:, None], -1.0))
        probs.masked_fill_(~valid[:, None], 0.0)  # not index_fill_ of nonzero(): that makes the host wait
        if probs is not logits:
            logits.copy_(probs)
    return losses


def check_linear_cross_entropy_inputs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int, chunk_size: int
) -> None:
    """One clear error for malformed inputs, before any work starts."""
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"linear_cross_entropy: expected hidden (N, H) and weight (V, H), got {tuple(hidden.shape)} "
            f"and {tuple(weight.shape)}; flatten hidden to 2-D first"
        )
    if targets.shape != (hidden.shape[0],) or targets.is_floating_point():
        raise ValueError(
            f"linear_cross_entropy: targets must be an integer tensor of shape ({hidden.shape[0]},), "
            f"got {targets.dtype} {tuple(targets.shape)}"
        )
    if chunk_size < 0:
        raise ValueError(f"linear_cross_entropy: chunk_size must be >= 0 (0 = automatic), got {chunk_size}")
    vocab = weight.shape[0]
    out_of_range = ((targets < 0) | (targets >= vocab)) & (targets != ignore_index)
    if targets.device.type == "cpu":
        if bool(out_of_range.any()):
            bad = targets[out_of_range][0].item()
            raise ValueError(
                f"linear_cross_entropy: target {bad} is outside the vocabulary [0, {vocab}) and is not "
                f"ignore_index ({ignore_index}); check the tokenizer/vocabulary size"
            )
    else:
        # An asynchronous device-side check: no host sync in the training step.
        torch._assert_async(
            ~out_of_range.any(),
            f"linear_cross_entropy: a target is outside the vocabulary [0, {vocab}) and is not ignore_index",
        )


def compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The matmul dtype the reference would get: the autocast dtype when autocast is on."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, weight.dtype)


def auto_chunk_rows(n_rows: int, vocab: int, dtype: torch.dtype, device: torch.device) -> int:
    budget = _GPU_CHUNK_BYTES if device.type != "cpu" else _CPU_CHUNK_BYTES
    # fp32 is what the chunk cross-entropy works in, whatever the logits dtype.
    per_row = vocab * max(torch.finfo(dtype).bits // 8, 4)
    return max(1, min(n_rows, budget // per_row))


class ChunkedLinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, ignore_index, chunk_rows, chunk_ce, wants, bias=None):
        """``wants``: (gradient of hidden, of weight, of bias) to compute in this pass; ``bias``: (V,) or None."""
        want_grad_h, want_grad_w, want_grad_b = wants
        dtype = compute_dtype(hidden, weight)
        with torch.autocast(hidden.device.type, enabled=False):
            h = hidden.to(dtype)
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            n_rows, n_hidden = h.shape
            compute_grad = want_grad_h or want_grad_w or want_grad_b
            grad_h = torch.empty(h.shape, dtype=h.dtype, device=h.device) if want_grad_h else None
            # Written by the first chunk, accumulated by the others (no zero-fill pass over the (V, H) matrix).
            grad_w = torch.empty(w.shape, dtype=torch.float32, device=w.device) if want_grad_w else None
            grad_b = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device) if want_grad_b else None
            if want_grad_w and n_rows == 0:
                grad_w.zero_()
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            # One logits buffer for every chunk: a fresh chunk-sized allocation each time costs page faults on CPU.
            buffer = torch.empty((min(chunk_rows, n_rows), w.shape[0]), dtype=dtype, device=h.device)
            for start in range(0, n_rows, chunk_rows):
                end = min(start + chunk_rows, n_rows)
                h_chunk = h[start:end]
                logits = torch.mm(h_chunk, w.t(), out=buffer[: end - start])
                if b is not None:
                    logits += b
                total += chunk_ce(logits, targets[start:end], ignore_index, compute_grad).sum()
                if want_grad_b:  # the chunk's logits now hold their gradient
                    grad_b += logits.sum(dim=0, dtype=torch.float32)
                if want_grad_h:
                    torch.mm(logits, w, out=grad_h[start:end])
                if want_grad_w:
                    first = start == 0
                    if dtype == torch.float32:
                        grad_w.addmm_(logits.t(), h_chunk, beta=0.0 if first else 1.0)  # beta 0: not read
                    elif first:
                        grad_w.copy_(logits.t() @ h_chunk)
                    else:
                        grad_w += logits.t() @ h_chunk
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.input_dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.used = False
        return total

    @staticmethod
    def backward(ctx, grad_total):
        if ctx.used:
            raise RuntimeError(
                "linear_cross_entropy: its gradients were computed in the forward pass and already consumed; "
                "a second backward (retain_graph=True) needs the 'reference' kernel backend"
            )
        ctx.used = True
        grad_h, grad_w, grad_b = ctx.saved_tensors
        hidden_dtype, weight_dtype, bias_dtype = ctx.input_dtypes
        if grad_h is not None:
            grad_h = grad_h.mul_(grad_total.to(grad_h.dtype)).to(hidden_dtype)
        if grad_w is not None:
            grad_w = grad_w.mul_(grad_total).to(weight_dtype)
        if grad_b is not None:
            grad_b = grad_b.mul_(grad_total).to(bias_dtype)
        return grad_h, grad_w, None, None, None, None, None, grad_b


def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_size: int = 0,
    chunk_ce: ChunkCrossEntropy = torch_chunk_cross_entropy,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum of token cross-entropies of ``hidden @ weight.T (+ bias)``, computed ``chunk_size`` rows at a time.

    Same signature and result as ``reference.linear_cross_entropy``; ``chunk_size=0`` picks the
    chunk from a logits-memory budget.
    """
    check_linear_cross_entropy_inputs(hidden, weight, targets, ignore_index, chunk_size)
    grad_on = torch.is_grad_enabled()
    want_grad_h = grad_on and hidden.requires_grad
    want_grad_w = grad_on and weight.requires_grad
    want_grad_b = grad_on and bias is not None and bias.requires_grad
    rows = chunk_size or auto_chunk_rows(hidden.shape[0], weight.shape[0], compute_dtype(hidden, weight), hidden.device)
    return ChunkedLinearCrossEntropyFunction.apply(
        hidden, weight, targets, ignore_index, rows, chunk_ce, (want_grad_h, want_grad_w, want_grad_b), bias
    )
