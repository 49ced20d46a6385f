"""Figures that overlay the runs of a study from their ``metrics.jsonl`` files (matplotlib, an optional extra).

- ``validation_vs_steps.png`` and ``validation_vs_tokens.png``: validation MLM loss and CLM loss of every run;
  against tokens, a ``--continue-from`` run starts where its parent stopped;
- ``training_loss.png``: the training loss of every run, each run's objective switch marked by a dashed line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from megamlm import figures
from megamlm.training.metrics_file import MetricsError, read_metrics
from megamlm.training.run_record import RUN_RECORD

FIGURES = ("validation_vs_steps.png", "validation_vs_tokens.png", "training_loss.png")


@dataclass
class RunMetrics:
    name: str
    train: list[dict]
    validation: list[dict]
    switch_step: int | None


def load_run(folder: str | Path) -> RunMetrics:
    """A run's records and its switch step (from its run record, else where its objective changed)."""
    folder = Path(folder)
    records = read_metrics(folder)
    train = [r for r in records if r.get("kind") == "train"]
    if (folder / RUN_RECORD).is_file():
        switch = json.loads((folder / RUN_RECORD).read_text()).get("switch_step")
    else:  # the trainer logs the switch step itself, so the last record of the first objective is the switch
        switch = next((a["step"] for a, b in zip(train, train[1:]) if a.get("objective") != b.get("objective")), None)
    return RunMetrics(folder.name, train, [r for r in records if r.get("kind") == "validation"], switch)


def _series(records: list[dict], x: str, y: str) -> tuple[list, list]:
    points = [(r[x], r[y]) for r in records if r.get(x) is not None and r.get(y) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def plot_runs(folders: list[str | Path], output: str | Path) -> list[Path]:
    """Write the three figures for these run folders into ``output``; returns their paths."""
    runs = [load_run(folder) for folder in folders]
    if not figures.available():
        raise MetricsError(figures.MISSING)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for x, label, name in (("step", "step", FIGURES[0]), ("tokens", "tokens seen", FIGURES[1])):
        fig, axes = figures.figure(1, 2, figsize=(11, 4))
        for ax, metric, title in zip(axes, ("mlm_loss", "clm_loss"), ("validation MLM loss", "validation CLM loss")):
            for run in runs:
                ax.plot(*_series(run.validation, x, metric), marker="o", markersize=3, label=run.name)
            ax.set(xlabel=label, ylabel="loss", title=title)
            ax.xaxis.set_major_formatter(figures.engineering_formatter())  # token counts stay readable
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        written.append(figures.save(fig, output / name))
    fig, ax = figures.figure(figsize=(7, 4))
    for run in runs:
        (line,) = ax.plot(*_series(run.train, "step", "loss"), label=run.name)
        if run.switch_step is not None:
            ax.axvline(run.switch_step, color=line.get_color(), linestyle="--", alpha=0.7)
    ax.set(xlabel="step", ylabel="training loss", title="training loss (dashed: objective switch)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written.append(figures.save(fig, output / FIGURES[2]))
    return written
