"""The arms of a study: an *arm* is a run without its seed (``clm100-mlm100-m40``); its seeds are its replicates.

An arm's *kind* is what a claims table compares: ``mlm``, ``clm``, ``clm_then_mlm`` (the paper's), ``continuation``,
and for any other schedule its objective (``mntp``, ``mlm_then_clm``, ``mlm,clm,mlm``, ``mntp,mlm``): those are
part of no claim unless a claims table names their kind."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from megamlm.study.planning.plan import Plan
from megamlm.study.planning.runs import Run

CLM_FRACTION_KINDS = ("mlm", "clm", "clm_then_mlm")
"""The kinds of the paper's arms, each a CLM fraction of its budget (0, 1, or the share before the switch)."""


@dataclass
class Arm:
    label: str
    runs: list[Run]

    @property
    def clm_fraction(self) -> float | None:
        """The share of the budget trained with CLM, for the paper's kinds; None for any other arm."""
        run, kind = self.runs[0], self.kind
        if kind not in CLM_FRACTION_KINDS:
            return None
        if run.switch_step is None:
            return 1.0 if kind == "clm" else 0.0
        return run.switch_step / run.train_iters

    @property
    def kind(self) -> str:
        """``continuation``, else the run's objective: ``clm``, ``mlm``, ``clm_then_mlm`` (CLM then MLM at any
        switch), or another schedule's (``mntp``, ``mlm,clm,mlm``, ...)."""
        run = self.runs[0]
        return "continuation" if run.is_continuation else run.objective

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
