"""One optimizer step over the micro-batches of a global batch, for every parallel layout.

The guard against non-finite numbers decides on the global loss and the global gradient norm *before*
clipping: both are reduced over every rank, so every rank takes the same decision without another
collective. A skipped step changes no parameter and no optimizer state (no weight decay, no moment
update, no step count); only the gradients are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from megamlm.objectives import Batch
from megamlm.parallel.forward_backward import (
    clip_gradients_,
    forward_backward,
    global_grad_norm,
)
from megamlm.parallel.parallelize import ParallelModel


@dataclass
class StepResult:
    loss: float
    """Mean token loss over the global batch."""
    grad_norm: float
    """Global L2 norm of the gradients before clipping."""
    applied: bool
    """False when the loss or the norm was not finite: the update was skipped on every rank."""
    predicted_tokens: int


def train_step(pm: ParallelModel, optimizer: torch.optim.Optimizer, micro_batches: list[Batch], lr: float,
               clip_grad: float, device: torch.device, precision: str = "auto") -> StepResult:
    """Forward/backward this rank's micro-batches, then clip globally and apply one update at ``lr``."""
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
