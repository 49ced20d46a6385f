"""The arms of a study: an *arm* is a run without its seed (``clm100-mlm100-m40``); its seeds are its replicates."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from megamlm.study.plan import Plan, Run


@dataclass
class Arm:
    label: str
    runs: list[Run]

    @property
    def clm_fraction(self) -> float | None:
        run = self.runs[0]
        if run.is_continuation:
            return None
        if run.switch_step is None:
            return 1.0 if run.objective == "clm" else 0.0
        return run.switch_step / run.train_iters

    @property
    def kind(self) -> str:
        """``clm``, ``mlm``, ``clm_then_mlm`` (any two-phase run) or ``continuation``."""
        run = self.runs[0]
        if run.is_continuation:
            return "continuation"
        return run.objective if run.switch_step is None else "clm_then_mlm"

    @property
    def group(self) -> tuple:
        """Arms trained from scratch that answer the paper's questions together: same size, budget, mask ratio."""
        run = self.runs[0]
        return run.size, run.train_iters, run.mask_ratio


def arms(plan: Plan) -> list[Arm]:
    grouped: dict[str, list[Run]] = defaultdict(list)
    for run in plan.runs:
        grouped[f"{run.size}-{run.label}"].append(run)
    return [Arm(label, runs) for label, runs in grouped.items()]


def arm_of_run(plan: Plan) -> dict[str, Arm]:
    return {run.name: arm for arm in arms(plan) for run in arm.runs}
