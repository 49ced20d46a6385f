"""Finished steps as the host accounts for them, read from the device only when their numbers are needed.

When the non-finite guard is decided on the device (training/device_guard.py), a step's loss, gradient norm and
applied flag stay 0-d device tensors and the host never waits for a step. The loop hands every finished step to
a ``StepLedger`` and settles it when the numbers are needed (a log line, a validation, a checkpoint, a stop, the
last step; every step when an ``on_step`` callback watches): the pending steps are read in one device-to-host
copy, then accounted for in order exactly as the synchronous loop does it, step by step: the callback, the skip
warning, the NonFiniteGuard's streak and the reporter. The logged values are therefore the same; only the moment
the host reads them moves. Since the host no longer waits, it builds the next step's batch while the device
still runs the current one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from megamlm.log import log
from megamlm.training.guards import NonFiniteGuard
from megamlm.training.reporting import RunReporter
from megamlm.training.step import StepResult


@dataclass
class StepReport:
    """One finished step, as the ``on_step`` callback sees it."""

    step: int
    objective: str
    loss: float
    grad_norm: float
    lr: float
    applied: bool
    sample_ids: list[int]
    """The global sample ids this rank trained on."""


@dataclass
class FinishedStep:
    step: int
    objective: str
    lr: float
    sample_ids: list[int]
    consumed_samples: int
    is_switch_step: bool
    out: StepResult
    """Host numbers, or 0-d device tensors until ``read_steps``."""


def read_steps(steps: list[FinishedStep]) -> list[FinishedStep]:
    """``steps`` with host numbers; the device tensors of all of them come back in one transfer."""
    on_device = [s for s in steps if isinstance(s.out.loss, torch.Tensor)]
    if not on_device:
        return steps
    values = torch.stack([torch.stack([s.out.loss.double(), s.out.grad_norm.double(), s.out.applied.double()])
                          for s in on_device]).tolist()
    read = {id(s): replace(s, out=replace(s.out, loss=loss, grad_norm=norm, applied=bool(applied)))
            for s, (loss, norm, applied) in zip(on_device, values)}
    return [read.get(id(s), s) for s in steps]


class StepLedger:
    """Steps the host has not read yet, and their accounting once read."""

    def __init__(self, guard: NonFiniteGuard, reporter: RunReporter, global_batch_size: int,
                 on_step: Callable[[StepReport], None] | None = None):
        self.guard, self.reporter, self.on_step = guard, reporter, on_step
        self.global_batch_size = global_batch_size
        self.pending: list[FinishedStep] = []

    def add(self, finished: FinishedStep) -> None:
        self.pending.append(finished)

    def settle(self) -> int | None:
        """Read and account for every pending step, oldest first. Returns the step at which the guard stops the
        run (its --max-skipped-steps streak is complete); the steps after it were held back on the device
        (``SkipStreak``) and are not accounted for. None when the run goes on."""
        steps, self.pending = read_steps(self.pending), []
        for s in steps:
            out = s.out
            if self.on_step is not None:
                self.on_step(StepReport(s.step, s.objective, out.loss, out.grad_norm, s.lr, out.applied,
                                        s.sample_ids))
            if not out.applied:
                log(f"warning: step {s.step} skipped (update not applied): loss {out.loss}, grad-norm "
                    f"{out.grad_norm}; {len(self.guard.in_a_row) + 1} in a row, the run stops at "
                    f"{self.guard.max_in_a_row}")
            if self.guard.record(s.step, out.applied, out.loss, out.grad_norm, s.sample_ids):
                return s.step
            self.reporter.step(s.step, s.objective, out, s.lr, self.global_batch_size, s.consumed_samples,
                               s.is_switch_step)
        return None
