"""One fine-tuning run: a fresh head on the encoder, AdamW with a linear warmup/decay schedule, then
the scores on validation and test.

Steps as Hugging Face's trainer counts them under EncodEval's settings: `max_steps` > 0 wins over
epochs (a set smaller than max_steps x batch is cycled through several shuffled passes), otherwise
`epochs` passes. The protocol gives 1,000 steps to sequence classification, QA and retrieval and one
epoch to token classification (EncodEval's CoNLL-2003 and UNER configs set max_steps -1), except where a dataset
sets its own (`TaskData.max_steps`, from the registry: OntoNotes, 1,000 steps in EncodEval's config).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass

import torch

from megamlm.eval.tasks.base import Task

PROTOCOL_MAX_STEPS = {"sequence_classification": 1000, "question_answering": 1000, "retrieval": 1000,
                      "token_classification": -1}
"""EncodEval's max_steps per task type (-1: none, so one epoch)."""


@dataclass
class Hyperparameters:
    """The paper's fine-tuning protocol; learning rate and seed vary per run, the rest is shared."""
    lr: float = 2e-5
    seed: int = 0
    batch_size: int = 32
    micro_batch_size: int = 4
    """Examples per forward/backward (gradients accumulate to batch_size; EncodEval: 4 per device x 8
    accumulation steps). For retrieval, the mini-batch of the cached ranking loss (EncodEval: 4)."""
    max_steps: int | None = None
    """Optimizer steps; > 0 wins over epochs; -1: epochs only; None: the protocol's per dataset (OntoNotes: 1,000)
    or else per task type (1,000, or one epoch for token classification)."""
    epochs: float = 1.0
    """Passes over the train set when max_steps is -1."""
    warmup_ratio: float = 0.1
    """Fraction of the steps with a linear warmup from 0; the rest decays linearly to 0."""
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-5
    weight_decay: float = 0.1
    """Applied to matrices only; biases and normalisation weights (1-D tensors) are not decayed."""
    max_grad_norm: float = 1.0
    """Gradient-norm clipping threshold; 0 turns clipping off."""
    precision: str = "auto"
    """auto: bf16 autocast on CUDA (the paper fine-tunes in bf16), fp32 elsewhere; or bf16 / fp32."""

    def to_dict(self) -> dict:
        return asdict(self)


PRECISIONS = ("auto", "bf16", "fp32")


def max_steps_for(kind: str, hp: Hyperparameters, dataset_steps: int | None = None) -> int:
    """--max-steps if given, else the dataset's protocol steps (``TaskData.max_steps``), else its kind's."""
    if hp.max_steps is not None:
        return hp.max_steps
    return PROTOCOL_MAX_STEPS[kind] if dataset_steps is None else dataset_steps


def planned_steps(train_size: int, hp: Hyperparameters, kind: str = "sequence_classification",
                  dataset_steps: int | None = None) -> int:
    max_steps = max_steps_for(kind, hp, dataset_steps)
    if max_steps > 0:
        return max_steps
    return max(1, math.ceil(hp.epochs * math.ceil(train_size / hp.batch_size)))


def autocast_for(device: torch.device, precision: str):
    """A context factory: bf16 autocast, or nothing."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def linear_warmup_decay(step: int, total: int, warmup: int) -> float:
    """Multiplier of the peak LR for the optimizer step that follows `step` completed steps: transformers'
    linear schedule (0 at step 0, the peak after `warmup` steps, 0 at `total`)."""
    if step < warmup:
        return step / max(1, warmup)
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
    steps = planned_steps(len(features), hp, task.kind, task.data.max_steps)
    warmup = math.ceil(hp.warmup_ratio * steps)
    optimizer = _optimizer(model, hp)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_warmup_decay(s, steps, warmup))
    autocast = autocast_for(device, hp.precision)
    generator = torch.Generator().manual_seed(hp.seed)
    losses, diverged_at = [], None
    model.train()
    for step, indices in enumerate(_batches(len(features), min(hp.batch_size, len(features)), steps, generator)):
        batch = {k: v.to(device) for k, v in task.collate([features[i] for i in indices]).items()}
        optimizer.zero_grad(set_to_none=True)
        loss = task.forward_backward(model, batch, hp.micro_batch_size, autocast)
        if not torch.isfinite(loss):
            # A diverged run is a result of the protocol (high LRs do diverge): stop before the update,
            # keep the last finite weights, score them, and say so in the result.
            diverged_at = step
            break
        if hp.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, steps, losses[-1])
    model.eval()
    with autocast():
        scores = task.evaluate_splits(model, eval_splits, device)
    tail = losses[-max(1, len(losses) // 10):]
    return {"steps": steps, "steps_done": len(losses), "warmup_steps": warmup, "train_features": len(features),
            "diverged_at_step": diverged_at, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "mean_loss_last_10pct": sum(tail) / len(tail) if tail else None,
            "precision": "bf16" if autocast is not contextlib.nullcontext else "fp32",
            "seconds": time.time() - started, **scores}
