"""AdamW with weight decay on matrices only."""

from __future__ import annotations

import torch


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    eps: float, impl: str = "torch") -> torch.optim.Optimizer:
    """AdamW; ``impl="apex"`` uses apex's FusedAdam (decoupled weight decay, as AdamW)."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if impl == "apex":
        from apex.optimizers import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas, eps=eps, adam_w_mode=True)
    fused = all(p.is_cuda for p in decay + no_decay) and len(decay + no_decay) > 0
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def set_hyperparameters(optimizer: torch.optim.Optimizer, weight_decay: float, betas: tuple[float, float],
                        eps: float) -> None:
    """Make the optimizer's settings this launch's (a checkpoint's optimizer state carries its own)."""
    for group in optimizer.param_groups:
        is_matrix_group = any(p.ndim >= 2 for p in group["params"])
        group["weight_decay"] = weight_decay if is_matrix_group else 0.0
        group["betas"], group["eps"] = betas, eps
