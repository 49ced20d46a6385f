"""The validation curves of a study's runs from their ``metrics.jsonl`` files, along each run's lineage."""

from __future__ import annotations

from pathlib import Path

from megamlm.errors import UserError
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.runs import Run
from megamlm.study.running.local import finished_step
from megamlm.training.metrics_file import read_metrics

VALIDATION_METRICS = (("mlm_loss", "validation MLM loss"), ("mlm_accuracy", "validation MLM accuracy"),
                      ("clm_loss", "validation CLM loss"))
PHASE_METRICS = {"mntp": ("mntp_loss", "validation MNTP loss")}
"""What validation scores beyond ``VALIDATION_METRICS`` (MLM and CLM, always) when a run trains that objective in
some phase (training/validation.py)."""


def validation_metrics(plan: Plan) -> tuple[tuple[str, str], ...]:
    """The validation table's columns: MLM and CLM always, and the objective of every phase some run trains."""
    trained = {objective for run in plan.runs for objective in run.phases}
    return VALIDATION_METRICS + tuple(metric for objective, metric in PHASE_METRICS.items() if objective in trained)


def validation_curve(plan: Plan, run: Run) -> list[dict]:
    """Validation records of ``run`` from step 0 of its lineage: a branch's parent's up to the branch step; a
    continuation's steps shifted by its parent's length (``step`` then counts every step the model trained)."""
    own = [r for r in run_metrics(plan, run) if r.get("kind") == "validation"]
    if run.parent is None:
        return own
    parent = plan.run(run.parent)
    before = validation_curve(plan, parent)
    if run.branch_step:
        return [r for r in before if r["step"] <= run.branch_step] + [r for r in own if r["step"] > run.branch_step]
    offset = parent.train_iters
    return before + [{**r, "step": r["step"] + offset} for r in own if r["step"] > 0]


def drawn_curve(plan: Plan, run: Run) -> list[dict]:
    """The part of ``validation_curve`` a figure draws: a branch or continuation from the parent's record where it
    leaves the parent on (the parent's own line stays visible instead of being drawn over)."""
    start = run.branch_step or (plan.run(run.parent).train_iters if run.parent else 0)
    return [r for r in validation_curve(plan, run) if r["step"] >= start]


def run_metrics(plan: Plan, run: Run) -> list[dict]:
    folder = Path(plan.save_dir(run))
    if not (folder / "metrics.jsonl").is_file():
        return []
    try:
        return read_metrics(folder)
    except UserError:
        return []


def final_validation(plan: Plan, run: Run) -> dict | None:
    """The validation record at the run's last step, if the run has finished."""
    if not finished_step(plan.save_dir(run), run.train_iters):
        return None
    last = plan.run(run.parent).train_iters if run.is_continuation and not run.branch_step else 0
    records = [r for r in validation_curve(plan, run) if r["step"] == run.train_iters + last]
    return records[-1] if records else None
