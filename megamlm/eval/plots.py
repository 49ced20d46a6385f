"""The two figures: test score per model (objective) for each task, and test score against learning
rate for each task (the paper's fine-tuning-stability view). Files are written atomically."""

from __future__ import annotations

from pathlib import Path

from megamlm import figures
from megamlm.eval.aggregate import LrScores, TaskSummary


def plot_score_per_model(summaries: list[TaskSummary], path: Path) -> Path:
    tasks = sorted({s.task for s in summaries}, key=lambda t: (next(s.family for s in summaries if s.task == t), t))
    models = sorted({s.model for s in summaries})
    width = 0.8 / len(models)
    fig, ax = figures.figure(figsize=(max(5, 1.6 * len(tasks) * max(1, len(models) / 3)), 3.8))
    for i, model in enumerate(models):
        xs, ys, errs = [], [], []
        for j, task in enumerate(tasks):
            row = next((s for s in summaries if s.model == model and s.task == task), None)
            if row is not None:
                xs.append(j + (i - (len(models) - 1) / 2) * width)
                ys.append(row.test_mean)
                errs.append(row.test_ci)
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=model)
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels([f"{t}\n({next(s.metric for s in summaries if s.task == t)})" for t in tasks], fontsize=8)
    ax.set_ylabel("test score at best LR (mean ± 95% CI)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return figures.save(fig, path)


def plot_score_vs_lr(rows: list[LrScores], path: Path) -> Path:
    tasks = sorted({r.task for r in rows})
    models = sorted({r.model for r in rows})
    columns = min(3, len(tasks))
    lines = (len(tasks) + columns - 1) // columns
    fig, axes = figures.figure(lines, columns, figsize=(4.2 * columns, 3.2 * lines), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for model in models:
            points = sorted((r for r in rows if r.task == task and r.model == model), key=lambda r: r.lr)
            if points:
                ax.errorbar([p.lr for p in points], [p.test_mean for p in points], yerr=[p.test_ci for p in points],
                            marker="o", capsize=3, label=model)
        ax.set_xscale("log")
        grid = sorted({r.lr for r in rows if r.task == task})
        ax.set_xticks(grid)
        ax.set_xticklabels([f"{lr:g}" for lr in grid], fontsize=7)
        ax.minorticks_off()
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("learning rate")
        ax.set_ylabel("test score")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return figures.save(fig, path)
