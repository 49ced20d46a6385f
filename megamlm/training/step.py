"""One optimizer step over the micro-batches of a global batch, for every parallel layout.

The guard against non-finite numbers decides on the global loss and the global gradient norm *before*
clipping: both are reduced over every rank, so every rank takes the same decision without another
collective. A skipped step changes no parameter and no optimizer state (no weight decay, no moment
update, no step count); only the gradients are dropped.

With a ``SkipStreak`` (training/device_guard.py) the same decision is taken on the device and nothing is read
by the host: the result's numbers stay 0-d device tensors until training/step_metrics.py reads them.
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
from megamlm.training.device_guard import SkipStreak, guarded_update


@dataclass
class StepResult:
    loss: float | torch.Tensor
    """Mean token loss over the global batch (a 0-d device tensor until read when the step ran on the device)."""
    grad_norm: float | torch.Tensor
    """Global L2 norm of the gradients before clipping."""
    applied: bool | torch.Tensor
    """False when the loss or the norm was not finite: the update was skipped on every rank."""
    predicted_tokens: int


def train_step(pm: ParallelModel, optimizer: torch.optim.Optimizer, micro_batches: list[Batch], lr: float,
               clip_grad: float, device: torch.device, precision: str = "auto",
               streak: SkipStreak | None = None) -> StepResult:
    """Forward/backward this rank's micro-batches, then clip globally and apply one update at ``lr``.

    With ``streak`` (the fused AdamW only) the skip is decided on the device and the host does not wait: loss,
    grad norm and applied come back as 0-d device tensors holding the same values as without it.
    """
    if streak is not None:
        loss_t, predicted = forward_backward_on_device(pm, micro_batches, device, precision)
        norm_t = global_grad_norm(pm)
        applied_t = guarded_update(pm, optimizer, loss_t, norm_t, lr, clip_grad, hold=streak.stopped)
        streak.record(applied_t)
        return StepResult(loss=loss_t, grad_norm=norm_t, applied=applied_t, predicted_tokens=predicted)
    loss, predicted = forward_backward(pm, micro_batches, device, precision)
    norm = global_grad_norm(pm)
    grad_norm = float(norm)
    applied = math.isfinite(loss) and math.isfinite(grad_norm)
    if applied:
        if clip_grad > 0:
            clip_gradients_(pm, clip_grad, norm)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss=loss, grad_norm=grad_norm, applied=applied, predicted_tokens=predicted)
