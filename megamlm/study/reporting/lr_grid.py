"""The report's table of every evaluated model's scores per fine-tuning LR (test mean over fine-tuning seeds, the
validation mean in parentheses), its best LR by validation and where that sits in the grid, and its stability loss
(score at the best LR minus the mean at the others): the numbers the stability claim and the LR figures are made
from, printed so that they can be recomputed from the report."""

from __future__ import annotations

from megamlm.study.evidence.scores import Scores


def lr_grid_section(scores: Scores) -> str:
    """The table, or "" where no model was evaluated at more than one LR."""
    grid = scores.lrs
    if len(grid) < 2:
        return ""
    rows = []
    for model in sorted(scores.by_lr):
        for task in sorted(scores.by_lr[model]):
            lrs = scores.by_lr[model][task]
            cells = [f"{lrs[lr][1]:.2f} ({lrs[lr][0]:.2f})" if lr in lrs else "–" for lr in grid]
            best = scores.best_lr(model, task)
            place = grid.index(best)
            edge = " (edge)" if len(lrs) > 1 and place in (0, len(grid) - 1) else ""
            loss = scores.task_stability_loss(model, task)
            rows.append(f"| {model} | {task} | " + " | ".join(cells) + f" | {best:g}, {place + 1} of {len(grid)}"
                        f"{edge} | {'–' if loss is None else f'{loss:.2f}'} |")
    header = ("| model | task | " + " | ".join(f"LR {lr:g}" for lr in grid) + " | best LR (validation) | "
              "stability loss |\n|---|---|" + "---:|" * len(grid) + "---|---:|\n")
    return ("Every model's test mean over fine-tuning seeds at each LR of the grid (validation mean in parentheses), "
            "its best LR by validation and its place in the grid (*edge*: the grid's smallest or largest, where the "
            "loss on one side of the best is unmeasured), and its stability loss: the test score at the best LR "
            "minus the mean test score at the other LRs, in points.\n\n" + header + "\n".join(rows) + "\n")
