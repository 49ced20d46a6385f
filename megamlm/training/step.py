"""One optimizer step over the micro-batches of a global batch, for every parallel layout.

``train_step`` is the step: forward/backward of this rank's micro-batches (parallel/forward_backward.py), the
global gradient norm, then ``update``. The guard against non-finite numbers (training/nonfinite.py) decides on
the global loss and the global gradient norm *before* clipping: both are reduced over every rank, so every rank
takes the same decision without another collective. A skipped step changes no parameter and no optimizer state
(no weight decay, no moment update, no step count); only the gradients are dropped.

The decision is taken on the host (the synchronous path), or, with a ``SkipStreak``, on the device: the same
``update`` then hands torch's fused AdamW a ``found_inf`` flag and nothing is read by the host; the outcome's
numbers stay 0-d device tensors until training/reporter.py reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from megamlm.objectives import Batch
from megamlm.parallel.forward_backward import (
    clip_gradients_,
    forward_backward,
    forward_backward_on_device,
    global_grad_norm,
)
from megamlm.parallel.parallelize import ParallelModel
from megamlm.training.nonfinite import SkipStreak, nonfinite_flag


@dataclass
class StepOutcome:
    """One optimizer step's outcome: what ``train_step`` returns, what the loop's ledger and reporter account for
    (training/reporter.py) and what an ``on_step`` callback receives."""

    loss: float | torch.Tensor
    """Mean token loss over the global batch (a 0-d device tensor until read when the step ran on the device)."""
    grad_norm: float | torch.Tensor
    """Global L2 norm of the gradients before clipping."""
    applied: bool | torch.Tensor
    """False when the loss or the norm was not finite: the update was skipped on every rank."""
    predicted_tokens: int
    lr: float
    sample_ids: list[int]
    """The global sample ids this rank trained on."""
    step: int = 0
    """The 1-based step; it and the fields below are the loop's to fill in (``Trainer.run_step``)."""
    objective: str = ""
    consumed_samples: int = 0
    """Samples of the stream consumed after this step."""
    is_switch_step: bool = False


def train_step(pm: ParallelModel, optimizer: torch.optim.Optimizer, micro_batches: list[Batch], lr: float,
               clip_grad: float, device: torch.device, precision: str = "auto",
               streak: SkipStreak | None = None) -> StepOutcome:
    """Forward/backward this rank's micro-batches, then clip globally and apply one update at ``lr``.

    With ``streak`` (the fused AdamW only) the skip is decided on the device and the host does not wait: loss,
    grad norm and applied come back as 0-d device tensors holding the same values as without it.
    """
    sample_ids = [k for b in micro_batches for k in b.sample_ids]
    if streak is not None:
        loss_t, predicted = forward_backward_on_device(pm, micro_batches, device, precision)
        norm_t = global_grad_norm(pm)
        applied_t = guarded_update(pm, optimizer, loss_t, norm_t, lr, clip_grad, hold=streak.stopped)
        streak.record(applied_t)
        return StepOutcome(loss_t, norm_t, applied_t, predicted, lr, sample_ids)
    loss, predicted = forward_backward(pm, micro_batches, device, precision)
    norm = global_grad_norm(pm)
    grad_norm = float(norm)
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        update(pm, optimizer, norm, lr, clip_grad)
    else:
        optimizer.zero_grad(set_to_none=True)  # skipped: only the gradients are dropped
    return StepOutcome(loss, grad_norm, applied, predicted, lr, sample_ids)


def guarded_update(pm: ParallelModel, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                   grad_norm: torch.Tensor, lr: float, clip_grad: float,
                   hold: torch.Tensor | None = None) -> torch.Tensor:
    """``update`` unless ``loss`` or ``grad_norm`` is not finite, deciding on the device (no host synchronisation).

    ``loss`` and ``grad_norm`` are the step's global values as 0-d tensors (nothing is read from them here).
    Returns ``applied``, a 0-d bool tensor on the device. Gradients are dropped either way. A true ``hold`` (0-d
    bool) skips the update whatever the numbers (see ``SkipStreak``).
    """
    found_inf = nonfinite_flag(loss, grad_norm)
    if hold is not None:
        found_inf = torch.maximum(found_inf, hold.to(torch.float32))
    update(pm, optimizer, grad_norm, lr, clip_grad, found_inf=found_inf)
    return found_inf == 0


def update(pm: ParallelModel, optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor, lr: float,
           clip_grad: float, found_inf: torch.Tensor | None = None) -> None:
    """The optimizer update: clip by the global pre-clip ``grad_norm``, set ``lr``, step, drop the gradients.

    ``found_inf`` (0-d fp32): the device-side skip. torch's fused AdamW takes the flag (the mechanism
    ``torch.amp.GradScaler`` uses) and, where it is 1, leaves every parameter, both moments and the step count
    exactly as they were, on every rank alike since the flag comes from global numbers. Only that kernel honours
    it, so any other optimizer is refused.
    """
    if found_inf is not None and not optimizer.defaults.get("fused"):
        raise ValueError("guarded_update needs torch.optim.AdamW(fused=True): only the fused kernel skips an update "
                         "on the device")
    if clip_grad > 0:
        # Under a set found_inf a non-finite norm turns the gradients into zeros or NaNs here; the update that would
        # read them is skipped.
        clip_gradients_(pm, clip_grad, grad_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if found_inf is not None:
        optimizer.found_inf = found_inf
    try:
        optimizer.step()
    finally:
        if found_inf is not None:
            del optimizer.found_inf
    optimizer.zero_grad(set_to_none=True)
