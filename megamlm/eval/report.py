"""Write the aggregate table (Markdown and CSV), the per-LR table (CSV), the trivial baselines (rows of the Markdown
table named ``baseline:NAME``, and their own CSV, so results.csv keeps its columns), the paired comparisons asked
for (``paired.py``) and the two figures."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

from megamlm import figures
from megamlm.eval.aggregate import LrScores, TaskSummary, family_averages
from megamlm.eval.baseline_store import BaselineRow
from megamlm.eval.results import write_text_atomic


def _csv(rows: list) -> str:
    buffer = io.StringIO()
    if rows:
        fields = [f.name for f in dataclasses.fields(rows[0])]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:  # a tuple of LRs as "0.001 0.003"
            writer.writerow({k: " ".join(f"{x:g}" for x in v) if isinstance(v, tuple) else v
                             for k, v in dataclasses.asdict(row).items()})
    return buffer.getvalue()


def mean_and_interval(mean: float, ci: float, seeds: int) -> str:
    """``71.20 ± 1.05``; with one seed there is no interval: ``71.20 ± n/a``."""
    return f"{mean:.2f} ± {ci:.2f}" if seeds > 1 else f"{mean:.2f} ± n/a"


def markdown_table(summaries: list[TaskSummary], baselines: list[BaselineRow] = ()) -> str:
    """One row per (model, task); a task's trivial baselines follow its models, with "–" for what training has
    (LR, seeds, runs) and "(no training)" after their test score."""
    lines = ["| model | family | task | metric | best LR | val | test (mean ± 95% CI) | seeds | runs |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = [(s.family, s.task, 0, s.model, s) for s in summaries] + [(b.family, b.task, 1, b.model, b)
                                                                     for b in baselines]
    for *_, s in sorted(rows, key=lambda row: row[:4]):
        if isinstance(s, BaselineRow):
            lines.append(f"| {s.model} | {s.family} | {s.task} | {s.metric} | – | {s.validation:.2f} | "
                         f"{s.test:.2f} (no training) | – | – |")
            continue
        runs = f"{s.runs}/{s.planned_runs}" + (f", {s.diverged_runs} diverged" if s.diverged_runs else "")
        best = " and ".join(f"{lr:g}" for lr in s.chosen_lrs) or f"{s.best_lr:g}"  # several: the mean over them
        lines.append(f"| {s.model} | {s.family} | {s.task} | {s.metric} | {best} | {s.validation_mean:.2f} | "
                     f"{mean_and_interval(s.test_mean, s.test_ci, s.seeds)} | {s.seeds} | {runs} |")
    families = family_averages(summaries)
    if families:
        models = sorted({m for m, _ in families})
        names = sorted({f for _, f in families})
        lines += ["", "Family averages (mean test score over the family's tasks):", "",
                  "| model | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m in models:
            cells = [f"{families[(m, f)]:.2f}" if (m, f) in families else "–" for f in names]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(output: Path, summaries: list[TaskSummary], lr_rows: list[LrScores], plots: bool = True,
                 baselines: list[BaselineRow] = (), paired: str = "") -> list[Path]:
    """results.md (with ``paired``, the paired comparisons' section, after the table), the CSVs and figures."""
    written = [output / "results.md", output / "results.csv", output / "scores_per_lr.csv"]
    write_text_atomic(written[0], "# Fine-tuning results\n\n" + markdown_table(summaries, baselines)
                      + ("\n" + paired if paired else ""))
    write_text_atomic(written[1], _csv(summaries))
    write_text_atomic(written[2], _csv(lr_rows))
    if baselines:
        written.append(output / "baselines.csv")
        write_text_atomic(written[-1], _csv(list(baselines)))
    if plots and summaries:
        written.append(figures.score_per_model(summaries, output / "score_per_model.png"))
        written.append(figures.score_vs_lr(lr_rows, output / "score_vs_lr.png"))
    return written
