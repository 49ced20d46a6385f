"""The numbers behind a study report's figures (means and 95% intervals over pretraining seeds), handed to
megamlm.figures, which draws them; each figure only where the study has its data."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from megamlm import figures
from megamlm.eval.metrics import mean_confidence_interval
from megamlm.study.evidence.scores import Continued, Scores, continuation_gains, lr_curves, stability
from megamlm.study.planning.arms import arms
from megamlm.study.planning.plan import Plan
from megamlm.study.reporting.curves import VALIDATION_METRICS, drawn_curve, run_metrics


def _points(by_x: dict) -> list[tuple]:
    """x -> values as sorted (x, mean, 95% half-width)."""
    return [(x, *mean_confidence_interval(values)) for x, values in sorted(by_x.items())]


def validation_lines(plan: Plan) -> list[tuple[int, int, str | None, list[dict]]]:
    """(arm index, seed index, legend of the arm's first run, drawn curve) of every run with validation records
    (a run not started would only repeat its parent's curve)."""
    lines = []
    for i, arm in enumerate(arms(plan)):
        for k, run in enumerate(arm.runs):
            if any(r.get("kind") == "validation" for r in run_metrics(plan, run)):
                lines.append((i, k, arm.label if k == 0 else None, drawn_curve(plan, run)))
    return lines


def score_vs_fraction(plan: Plan, scores: dict, tasks: list[str]) -> dict[str, dict[str, list[tuple]]]:
    """task -> one line per budget and mask ratio: (CLM fraction, mean, 95% half-width) of its final models."""
    panels = {}
    for task in tasks:
        series: dict[tuple[int, float], list] = defaultdict(list)
        for arm in arms(plan):
            run = arm.runs[0]
            values = scores.get((arm.label, task, run.train_iters))
            if arm.clm_fraction is None or not values:
                continue
            series[(run.train_iters, run.mask_ratio)].append((arm.clm_fraction, *mean_confidence_interval(values)))
        panels[task] = {f"{budget:,} steps, {round(mask * 100)}% masking": sorted(points)
                        for (budget, mask), points in sorted(series.items())}
    return panels


def score_vs_steps(plan: Plan, scores: dict, tasks: list[str]) -> dict[str, dict[str, list[tuple]]]:
    """task -> one line per arm with 2 or more evaluated steps: (step, mean, 95% half-width)."""
    panels = {}
    for task in tasks:
        lines = {}
        for arm in arms(plan):
            points = sorted((step, *mean_confidence_interval(v)) for (label, t, step), v in scores.items()
                            if label == arm.label and t == task)
            if len(points) >= 2:
                lines[arm.label] = points
        panels[task] = lines
    return panels


def lr_sensitivity(curves: dict, families: list[str]) -> dict[str, dict[str, list[tuple]]]:
    """family -> arm -> (LR, mean, 95% half-width), only for arms fine-tuned at 2 or more LRs."""
    return {family: {label: _points(by_family[family]) for label, by_family in curves.items()
                     if len(by_family.get(family, {})) >= 2}
            for family in families if any(len(arm.get(family, {})) >= 2 for arm in curves.values())}


def stability_bars(losses: dict, families: list[str]) -> tuple[dict, list[str]]:
    """(arm -> family -> (mean, 95% half-width), the families some arm has a stability loss on)."""
    labels = [label for label, by_family in losses.items() if by_family]
    shown = [f for f in families if any(f in losses[label] for label in labels)]
    return ({label: {f: mean_confidence_interval(v) for f, v in losses[label].items() if v and f in shown}
             for label in labels}, shown)


def continuation_lines(continued: list[Continued], families: list[str]) -> dict[str, dict[str, list[tuple]]]:
    """family -> one line per parent arm and objective: (continued steps, mean gain, 95% half-width), from 0."""
    series: dict[tuple[str, str], dict] = defaultdict(dict)
    for c in continued:
        key = (c.parent.label, c.arm.runs[0].objective)
        for family, points in c.gains.items():
            for step, values in points:
                series[key].setdefault(family, {})[step] = values
    panels = {}
    for family in families:
        if not any(family in c.gains for c in continued):
            continue
        panels[family] = {f"{objective.upper()} from {parent}": [(0, 0.0, 0.0)] + _points(by_family[family])
                          for (parent, objective), by_family in series.items() if by_family.get(family)}
    return panels


def draw_figures(plan: Plan, folder: Path, arm_task_scores: dict, tasks: list[str],
                 scores: Scores) -> list[tuple[str, Path]]:
    """Draw the report's figures into ``folder``: (title, path) of each one drawn."""
    made = [("validation curves", figures.study_validation(validation_lines(plan), VALIDATION_METRICS,
                                                            folder / "validation.png"))]
    if tasks:
        bars, shown = stability_bars(stability(plan, scores), scores.families)
        made += [("score against the CLM fraction", figures.study_scores(
                     score_vs_fraction(plan, arm_task_scores, tasks), "CLM fraction of the budget",
                     folder / "score_vs_clm_fraction.png")),
                 ("score against pretraining steps", figures.study_scores(
                     score_vs_steps(plan, arm_task_scores, tasks), "pretraining step", folder / "score_vs_steps.png")),
                 ("score against the fine-tuning learning rate", figures.study_lr_sensitivity(
                     lr_sensitivity(lr_curves(plan, scores), scores.families), folder / "lr_sensitivity.png")),
                 ("fine-tuning stability across learning rates", figures.study_stability(
                     bars, shown, folder / "lr_stability.png")),
                 ("continued-pretraining gain against continued steps", figures.study_continuation_gain(
                     continuation_lines(continuation_gains(plan, scores), scores.families),
                     folder / "continuation_gain.png"))]
    return [(title, path) for title, path in made if path is not None]
