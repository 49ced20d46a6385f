"""The statistics of a study report: an arm's values per metric (``Sample``), which seeds a comparison of two arms
runs over, and the descriptive table of every pair of arms: the difference of means with its unadjusted 95%
Welch-Satterthwaite interval and the unadjusted p-value of Welch's two-sided t-test, plainly labelled (fewer than
2 values in an arm: n/a). The table names nothing significant: its many cells over few seeds are description, and
the claims section's pre-registered tests (``decision.py``) are the report's only conclusions. Where both arms
have a single pretraining seed, as the paper's models, a comparison runs over the fine-tuning seeds of each one's
model at its selected LR.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from megamlm.eval.metrics import Comparison, compare

PRETRAINING_SEEDS = "pretraining seeds"
FINETUNING_SEEDS = "fine-tuning seeds at the best LR"


@dataclass
class Sample:
    """An arm's values for one metric: one per pretraining seed, and, where the arm has a single pretraining seed,
    its model's test scores over fine-tuning seeds at the selected LR (what the paper's single models allow)."""
    pretraining: list[float]
    finetuning: list[float] = dataclasses.field(default_factory=list)


def test_basis(a: dict[str, Sample], b: dict[str, Sample]) -> str:
    """Which variance a comparison of two arms covers: their pretraining seeds, or, where both have a single
    pretraining seed (as the paper's models), the fine-tuning seeds of each one's model at its selected LR."""
    seeds = [max((len(s.pretraining) for s in arm.values()), default=0) for arm in (a, b)]
    finetuned = all(any(s.finetuning for s in arm.values()) for arm in (a, b))
    return FINETUNING_SEEDS if seeds == [1, 1] and finetuned else PRETRAINING_SEEDS


def sample_values(sample: Sample, basis: str) -> list[float]:
    return sample.finetuning if basis == FINETUNING_SEEDS else sample.pretraining


def fmt_mean(mean: float, ci: float, digits: int) -> str:
    return f"{mean:.{digits}f} ± {ci:.{digits}f}" if ci else f"{mean:.{digits}f}"


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _cell(c: Comparison, digits: int) -> str:
    if not c.tested:
        why = "fewer than 2 values in an arm" if min(c.n_a, c.n_b) < 2 else "no spread in either arm"
        return f"{c.difference:+.{digits}f} (n/a: {why})"
    low, high = c.difference - c.half_width, c.difference + c.half_width
    return f"{c.difference:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}], p = {c.p_value:.3f}"


def comparison_table(values: dict[str, dict[str, Sample]], metrics: list[str], digits: int,
                     rehearsal: bool = False) -> str:
    """Every pair of arms on every metric: the difference of means, and (not in a rehearsal) its unadjusted 95%
    Welch interval and unadjusted p-value, descriptive."""
    labels = list(values)
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]
    if not pairs:
        return ""
    cells: dict[tuple[str, str, str], Comparison] = {}
    bases = {}
    for a, b in pairs:
        bases[(a, b)] = test_basis(values[a], values[b])
        for metric in metrics:
            sa, sb = values[a].get(metric), values[b].get(metric)
            if sa and sb and sample_values(sa, bases[(a, b)]) and sample_values(sb, bases[(a, b)]):
                cells[(a, b, metric)] = compare(sample_values(sa, bases[(a, b)]), sample_values(sb, bases[(a, b)]))
    keys = list(cells)
    header = "| A − B | test over | " + " | ".join(metrics) + " |\n|---|---|" + "---|" * len(metrics) + "\n"
    rows = []
    for a, b in pairs:
        row = []
        for metric in metrics:
            c = cells.get((a, b, metric))
            if c is None:
                row.append("–")
            elif rehearsal:
                row.append(f"{c.difference:+.{digits}f}")
            else:
                row.append(_cell(c, digits))
        rows.append(f"| {a} − {b} | {'–' if rehearsal else bases[(a, b)]} | " + " | ".join(row) + " |")
    table = header + "\n".join(rows) + "\n"
    if rehearsal:
        return ("Differences between arms (mean of A − mean of B), untested: a rehearsal of the pipeline draws no "
                "conclusions.\n\n" + table)
    tested = [k for k in keys if cells[k].tested]
    finetuning = any(bases[p] == FINETUNING_SEEDS for p in pairs)
    summary = ("" if tested else
               "No difference in this table could be tested (fewer than 2 values in an arm, or no spread).\n\n")
    explain = ("Differences between arms, descriptive: mean of A − mean of B, its unadjusted 95% interval "
               "(Welch-Satterthwaite) in brackets, and the unadjusted p-value of Welch's two-sided t-test over the "
               "seeds named under *test over*. Nothing here is called significant: over this many cells and few "
               "seeds some unadjusted p-values are small by chance; the report's conclusions are the claims "
               "section's pre-registered tests. n/a: no test (fewer than 2 values in an arm, or no spread).")
    if finetuning:
        explain += (" Over fine-tuning seeds (both arms have one pretraining seed): the variance of fine-tuning "
                    "alone, at each model's selected LR; it says whether the two pretrained models differ, not "
                    "whether their recipes would over other pretraining seeds.")
    return summary + explain + "\n\n" + table
