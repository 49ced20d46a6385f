"""An opt-in record of every step, for tests (the training loop itself keeps no history).

Imported by module name from every test folder (and by spawned ranks, which inherit sys.path): tests/conftest.py
puts this folder on sys.path.
"""

from __future__ import annotations

from megamlm.training.step import StepOutcome


class StepRecorder:
    """Pass as ``pretrain(cfg, on_step=StepRecorder())``; its memory grows with the number of steps."""

    def __init__(self):
        self.losses: dict[int, float] = {}
        self.objectives: dict[int, str] = {}
        self.sample_ids: dict[int, list[int]] = {}
        self.grad_norms: dict[int, float] = {}
        self.lrs: dict[int, float] = {}
        self.skipped_steps: list[int] = []

    def __call__(self, outcome: StepOutcome) -> None:
        self.losses[outcome.step] = outcome.loss
        self.objectives[outcome.step] = outcome.objective
        self.sample_ids[outcome.step] = list(outcome.sample_ids)
        self.grad_norms[outcome.step] = outcome.grad_norm
        self.lrs[outcome.step] = outcome.lr
        if not outcome.applied:
            self.skipped_steps.append(outcome.step)


def run_as_written(*argv):
    """pretrain.py's run of ``argv`` alone (no test settings added), its steps recorded: the run's result and the
    recorder's fields in one namespace."""
    from types import SimpleNamespace

    from megamlm.config import parse_args
    from megamlm.training.trainer import pretrain

    recorder = StepRecorder()
    result = pretrain(parse_args([str(a) for a in argv]), on_step=recorder)
    return SimpleNamespace(**vars(result), **vars(recorder))
