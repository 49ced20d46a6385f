"""An opt-in record of every step, for tests and notebooks (the training loop itself keeps no history)."""

from __future__ import annotations

from megamlm.training.step_metrics import StepReport


class StepRecorder:
    """Pass as ``pretrain(cfg, on_step=StepRecorder())``; its memory grows with the number of steps."""

    def __init__(self):
        self.losses: dict[int, float] = {}
        self.objectives: dict[int, str] = {}
        self.sample_ids: dict[int, list[int]] = {}
        self.grad_norms: dict[int, float] = {}
        self.lrs: dict[int, float] = {}
        self.skipped_steps: list[int] = []

    def __call__(self, report: StepReport) -> None:
        self.losses[report.step] = report.loss
        self.objectives[report.step] = report.objective
        self.sample_ids[report.step] = list(report.sample_ids)
        self.grad_norms[report.step] = report.grad_norm
        self.lrs[report.step] = report.lr
        if not report.applied:
            self.skipped_steps.append(report.step)
