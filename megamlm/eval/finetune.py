"""One fine-tuning run: a fresh head on the encoder, AdamW with a linear warmup/decay schedule for
min(max_steps, epochs over the train set) steps, then the scores on validation and test."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

from megamlm.eval.tasks.base import Task


@dataclass
class Hyperparameters:
    """The paper's fine-tuning protocol; learning rate and seed vary per run, the rest is shared."""
    lr: float = 2e-5
    seed: int = 0
    batch_size: int = 32
    max_steps: int = 1000
    """Upper bound on optimizer steps; a run also stops after `epochs` passes over the train set."""
    epochs: float = 1.0
    warmup_ratio: float = 0.1
    """Fraction of the steps with a linear warmup from 0; the rest decays linearly to 0."""
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-5
    weight_decay: float = 0.1
    """Applied to matrices only; biases and normalisation weights (1-D tensors) are not decayed."""
    max_grad_norm: float = 1.0
    """Gradient-norm clipping threshold; 0 turns clipping off."""

    def to_dict(self) -> dict:
        return asdict(self)


def planned_steps(train_size: int, hp: Hyperparameters) -> int:
    return max(1, min(hp.max_steps, math.ceil(hp.epochs * math.ceil(train_size / hp.batch_size))))


def linear_warmup_decay(step: int, total: int, warmup: int) -> float:
    """Multiplier of the peak LR for the optimizer step that follows `step` completed steps."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(0.0, (total - step) / max(1, total - warmup))


def _optimizer(model: torch.nn.Module, hp: Hyperparameters) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": hp.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=(hp.beta1, hp.beta2), eps=hp.eps)


def _batches(size: int, batch_size: int, steps: int, generator: torch.Generator):
    """Indices of each step's batch: shuffled passes over the data, reshuffled at every pass."""
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch_size:
            order += torch.randperm(size, generator=generator).tolist()
        yield order[:batch_size]
        order = order[batch_size:]


def run_finetuning(task: Task, encoder_loader, hp: Hyperparameters, device: torch.device,
                   eval_splits=("validation", "test"), progress=None) -> dict:
    """Fine-tune a freshly loaded encoder (`encoder_loader()`) on `task`; return losses and scores."""
    started = time.time()
    torch.manual_seed(hp.seed)
    model = task.build_model(encoder_loader()).to(device)
    features = task.train_features()
    steps = planned_steps(len(features), hp)
    warmup = round(hp.warmup_ratio * steps)
    optimizer = _optimizer(model, hp)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_warmup_decay(s, steps, warmup))
    generator = torch.Generator().manual_seed(hp.seed)
    losses, diverged_at = [], None
    model.train()
    for step, indices in enumerate(_batches(len(features), min(hp.batch_size, len(features)), steps, generator)):
        batch = {k: v.to(device) for k, v in task.collate([features[i] for i in indices]).items()}
        loss = task.loss(model, batch)
        if not torch.isfinite(loss):
            # A diverged run is a result of the protocol (high LRs do diverge): stop, keep the last finite
            # weights, score them, and say so in the result.
            diverged_at = step
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if hp.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, steps, losses[-1])
    model.eval()
    scores = {split: task.evaluate(model, split, device) for split in eval_splits}
    tail = losses[-max(1, len(losses) // 10):]
    return {"steps": steps, "steps_done": len(losses), "warmup_steps": warmup, "train_features": len(features),
            "diverged_at_step": diverged_at, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "mean_loss_last_10pct": sum(tail) / len(tail) if tail else None,
            "seconds": time.time() - started, **scores}
