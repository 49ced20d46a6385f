"""Two models compared on the same test examples: paired tests on the per-example predictions each fine-tuning
run keeps beside its result (``results.predictions_path``), which need far fewer examples than a comparison of
two scores over seeds, because each example is its own control.

- Accuracy of a classification (each example right or wrong): McNemar's exact test, the two-sided exact binomial
  test (scipy's ``binomtest``) of the discordant examples, those one model gets right and the other wrong, against
  p = 1/2; the examples both get right or both get wrong say nothing about which is better.
- Every other score (SQuAD F1, nDCG@10, tagging accuracy, span F1): a paired permutation test: under H0 the two
  models' predictions of an example are exchangeable, so each example's parts (``metrics.score_from_parts``) are
  swapped between the models at random, ``ROUNDS`` times from a fixed generator, and the corpus score difference
  recomputed each time; p = (1 + rounds at least as far from 0 as the observed) / (1 + ROUNDS), two-sided. For a
  score that is a mean over examples this is the sign-flip test of the per-example differences; for a ratio or a
  span F1 the corpus score is recomputed from the swapped counts, so the test is of the score the task reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from megamlm.eval.metrics import MEAN, score_from_parts
from megamlm.eval.results import RunKey

ROUNDS = 9_999
CHUNK = 1_000


@dataclass(frozen=True)
class Paired:
    """One paired comparison of model ``a`` with ``b`` on one split of one task (one fine-tuning seed each)."""
    task: str
    a: str
    b: str
    seed: int
    examples: int
    score_a: float
    score_b: float
    test: str
    p_value: float
    detail: str = ""
    """McNemar: the discordant counts."""

    @property
    def difference(self) -> float:
        return self.score_a - self.score_b


def mcnemar(right_a, right_b) -> tuple[int, int, float]:
    """(examples only ``a`` gets right, only ``b`` gets right, McNemar's exact two-sided p-value)."""
    right_a, right_b = np.asarray(right_a, dtype=bool), np.asarray(right_b, dtype=bool)
    only_a, only_b = int((right_a & ~right_b).sum()), int((right_b & ~right_a).sum())
    if only_a + only_b == 0:
        return only_a, only_b, 1.0
    return only_a, only_b, float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def paired_permutation(parts_a, parts_b, aggregate: str, rounds: int = ROUNDS, seed: int = 0) -> tuple[float, float]:
    """(score of a − score of b, two-sided p) of the paired permutation test over examples (module docstring);
    ``parts_*``: (examples, k) per-example parts of the same examples in the same order."""
    a, b = np.asarray(parts_a, dtype=float), np.asarray(parts_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_permutation: the two models' parts differ in shape ({a.shape} and {b.shape}): "
                         "they were not scored on the same examples")
    observed = float(score_from_parts(aggregate, a) - score_from_parts(aggregate, b))
    rng = np.random.default_rng(seed)
    tolerance = 1e-9 * (1.0 + abs(observed))
    extreme, done = 0, 0
    while done < rounds:
        n = min(CHUNK, rounds - done)
        swap = rng.random((n, a.shape[0], 1)) < 0.5
        first, second = np.where(swap, b, a), np.where(swap, a, b)
        differences = score_from_parts(aggregate, first) - score_from_parts(aggregate, second)
        extreme += int((np.abs(differences) >= abs(observed) - tolerance).sum())
        done += n
    return observed, (1 + extreme) / (1 + rounds)


def compare_runs(a: dict, b: dict, split: str = "test") -> Paired:
    """Compare two runs' kept predictions (``results.read_predictions``) on ``split``."""
    pa, pb = a[split], b[split]
    if pa["ids"] != pb["ids"]:
        raise ValueError(f"{a['model']} and {b['model']} on {a['task']} were scored on different {split} examples; "
                         "a paired test needs the same ones (same task data and --max-eval-examples)")
    parts_a, parts_b = np.asarray(pa["parts"], dtype=float), np.asarray(pb["parts"], dtype=float)
    score_a, score_b = (float(score_from_parts(pa["aggregate"], p)) for p in (parts_a, parts_b))
    common = dict(task=a["task"], a=a["model"], b=b["model"], seed=a["seed"], examples=len(pa["ids"]),
                  score_a=score_a, score_b=score_b)
    binary = np.isin(parts_a[:, 0], (0.0, 100.0)).all() and np.isin(parts_b[:, 0], (0.0, 100.0)).all()
    if pa["aggregate"] == MEAN and a.get("metric") == "accuracy" and binary:
        only_a, only_b, p = mcnemar(parts_a[:, 0] > 0, parts_b[:, 0] > 0)
        return Paired(**common, test="McNemar exact", p_value=p,
                      detail=f"{only_a} right only by {a['model']}, {only_b} only by {b['model']}")
    _, p = paired_permutation(parts_a, parts_b, pa["aggregate"])
    return Paired(**common, test=f"paired permutation ({ROUNDS:,} swaps)", p_value=p)


def read_predictions(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def paired_comparisons(output: Path, summaries, pairs: list[tuple[str, str]], seeds: dict[str, tuple[int, ...]]
                       ) -> list[Paired]:
    """Each pair (a, b) on every task both have results on: each at its best LR (``aggregate.summarize``), one
    comparison per fine-tuning seed both have (``seeds``: model -> its fine-tuning seeds), on the test examples."""
    best = {(s.model, s.task): s.best_lr for s in summaries}
    out = []
    for a, b in pairs:
        for task in sorted({s.task for s in summaries}):
            if (a, task) not in best or (b, task) not in best:
                continue
            for seed in sorted(set(seeds.get(a, ())) & set(seeds.get(b, ()))):
                ka, kb = RunKey(a, task, best[(a, task)], seed), RunKey(b, task, best[(b, task)], seed)
                ra, rb = (read_predictions(Path(output) / k.predictions_path()) for k in (ka, kb))
                if ra is not None and rb is not None and "test" in ra and "test" in rb:
                    out.append(compare_runs(ra, rb))
    return out


def paired_table(comparisons: list[Paired]) -> str:
    """The report's section: one row per comparison, with the rule it was tested by."""
    if not comparisons:
        return ""
    rows = [f"| {c.a} − {c.b} | {c.task} | {c.seed} | {c.examples} | {c.score_a:.2f} | {c.score_b:.2f} | "
            f"{c.difference:+.2f} | {c.test} | {c.p_value:.4f} | {c.detail or '–'} |" for c in comparisons]
    return ("## Paired comparisons on the same test examples\n\n"
            "Each model at its best LR (validation), one comparison per fine-tuning seed both have, on the same test "
            "examples: accuracy by McNemar's exact test on the examples one model gets right and the other wrong; "
            f"every other score by a paired permutation test ({ROUNDS:,} random swaps of the two models' predictions "
            "of an example, the task's score recomputed each time). Two-sided, unadjusted p-values: each row says "
            "whether these two fine-tuned models differ on these examples, not whether their pretraining recipes "
            "would over other pretraining seeds.\n\n"
            "| A − B | task | fine-tuning seed | examples | A | B | A − B | test | p | detail |\n"
            "|---|---|---|---:|---:|---:|---:|---|---:|---|\n" + "\n".join(rows) + "\n")
