"""One optimizer step over the micro-batches of a global batch (gradient accumulation)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from megamlm.objectives import IGNORE_INDEX, Batch, sparse_lm_loss


@dataclass
class StepStats:
    loss: float
    grad_norm: float
    predicted_tokens: int


def autocast_context(device: torch.device, precision: str):
    """bf16 autocast on GPU (``auto`` or ``bf16``), plain fp32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, micro_batches: list[Batch], lr: float,
               clip_grad: float, device: torch.device, precision: str = "auto") -> StepStats:
    """Forward/backward every micro-batch, clip, and apply one AdamW update at ``lr``.

    The loss is the mean over every predicted token of the global batch: each micro-batch contributes its
    token-loss *sum* divided by the global batch's token count, so the gradient does not depend on how the
    batch is split into micro-batches.
    """
    total_tokens = sum(int((b.targets != IGNORE_INDEX).sum()) for b in micro_batches)
    loss_sum = torch.zeros((), device=device, dtype=torch.float32)
    for batch in micro_batches:
        input_ids = batch.input_ids.to(device, non_blocking=True)
        targets = batch.targets.to(device, non_blocking=True)
        document_ids = batch.document_ids.to(device) if batch.document_ids is not None else None
        with autocast_context(device, precision):
            hidden = model(input_ids, causal=batch.causal, document_ids=document_ids)
            micro_loss, _ = sparse_lm_loss(hidden, model.lm_head.weight, targets, model.backends.kernels)
        (micro_loss / max(total_tokens, 1)).backward()
        loss_sum += micro_loss.detach()
    max_norm = clip_grad if clip_grad > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(loss=float(loss_sum) / max(total_tokens, 1), grad_norm=float(grad_norm),
                     predicted_tokens=total_tokens)
