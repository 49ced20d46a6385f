"""Numerical guards: a step whose gradients are not finite on some rank is skipped on every rank, and a run
that keeps producing such steps stops with an error naming the steps and samples involved.

``SkipNonFiniteUpdates`` stands in for the optimizer inside any step function (single-process or parallel):
its ``step()`` applies the update only when every rank's gradients are finite, so a skipped step leaves
weights and optimizer state exactly as they were. A non-finite loss makes the gradients non-finite too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from megamlm.training.agreement import any_rank


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient norm."""


def gradients_finite(optimizer: torch.optim.Optimizer) -> bool:
    """Whether this rank's gradients (its local shards, for DTensor parameters) hold only finite numbers."""
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                grad = p.grad
                grads.append(grad.to_local() if hasattr(grad, "to_local") else grad)
    if not grads:
        return True
    return bool(torch.isfinite(torch.nn.utils.get_total_norm(grads, 2.0)))


class SkipNonFiniteUpdates:
    """The optimizer, except that ``step()`` is skipped on every rank when any rank's gradients are not finite."""

    def __init__(self, optimizer: torch.optim.Optimizer, group=None):
        self.optimizer = optimizer
        self.group = group
        self.skipped = False

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self, closure=None):
        (self.skipped,) = any_rank([not gradients_finite(self.optimizer)], self.group)
        if not self.skipped:
            return self.optimizer.step(closure)
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


@dataclass
class SkippedStep:
    step: int
    loss: float
    grad_norm: float
    sample_ids: list[int]


class NonFiniteGuard:
    """Counts skipped steps; ``record`` says when ``max_in_a_row`` of them came in a row."""

    def __init__(self, max_in_a_row: int, group=None):
        self.max_in_a_row = max_in_a_row
        self.group = group
        self.in_a_row: list[SkippedStep] = []
        self.total_skipped = 0

    def record(self, step: int, skipped: bool, loss: float, grad_norm: float, sample_ids: list[int]) -> bool:
        """Note one step; True when the run must stop."""
        if not skipped:
            self.in_a_row.clear()
            return False
        self.in_a_row.append(SkippedStep(step, loss, grad_norm, list(sample_ids)))
        self.total_skipped += 1
        return len(self.in_a_row) >= self.max_in_a_row

    def describe(self, skipped: SkippedStep) -> str:
        return (f"step {skipped.step}: loss {skipped.loss}, grad-norm {skipped.grad_norm}, "
                f"samples {_format_ids(self._all_sample_ids(skipped))}")

    def _all_sample_ids(self, skipped: SkippedStep) -> list[int]:
        """The step's samples on every rank (each data-parallel rank sees only its own)."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(self.group) == 1:
            return skipped.sample_ids
        gathered: list = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, skipped.sample_ids, group=self.group)
        return sorted({k for ids in gathered for k in ids})

    def error(self, saved: str) -> NonFiniteError:
        steps = "; ".join(self.describe(s) for s in self.in_a_row)
        return NonFiniteError(
            f"{len(self.in_a_row)} steps in a row had a non-finite loss or gradient norm (--max-skipped-steps "
            f"{self.max_in_a_row}), so none of their updates was applied: {steps}. {saved} Check these samples "
            "and consider a lower --lr or --clip-grad before relaunching")


def _format_ids(ids: list[int]) -> str:
    """[0-3, 8, 10-11]: runs of consecutive ids collapsed (a global batch is one run of sample indices)."""
    runs: list[list[int]] = []
    for k in sorted(ids):
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return "[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "]"
