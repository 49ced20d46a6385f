"""The claims section's rules, declared once: the numbers the evidence code decides with, and the prose the report
states them in, generated from the same declarations (``rules_text``). ``decision.py`` (the tests, Holm),
``claims.py`` (what a claim compares, the unit, the stability measure) and ``informative.py`` (which tasks) read
their thresholds from here; ``reporting/claims_text.py`` prints ``rules_text`` and never restates a rule."""

from __future__ import annotations

from megamlm.eval.metrics import SIGNIFICANCE

LEVEL = SIGNIFICANCE
"""Holm-adjusted p below this: significant."""
STABILITY_MIN_LRS = 3
"""The stability claim needs a fine-tuning LR grid of at least this many LRs, its best LR inside the grid."""
# The tie rules (eval/aggregate.py's TIE_RULES and TIE_TOLERANCE, which every table and claim reads): the
# reasonable ways to resolve fine-tuning LRs tied at the best validation mean: the smaller LR, the larger, or the
# mean of the tied LRs' test scores. The study file fixes one (``evaluation.tie_rule``) before its run; the report
# decides every claim under each, and a verdict that changes with the rule is *fragile*, not supported.
FRAGILE = "fragile"
UNIT = "pretraining seed"
"""The unit of independence: models sharing a trunk are averaged per seed of their trunk."""


def _points(value: float) -> str:
    return f"{value:g} point{'s' if value != 1 else ''}"


def informative_text(margin: float) -> str:
    """The informative-task rule, in the report's words."""
    return (f"A task is used by the claims only where, on validation scores and before any test score is read, some "
            f"arm's mean (over its {UNIT}s; each model at its best LR by validation) beats both its size's "
            f"random-init model (at its best LR) and the task's best trivial baseline by more than "
            f"{_points(margin)} (the study file's `evaluation.informative_margin`). Choosing tasks on the scores the "
            "claims then test would bias the tests; validation scores are not what they test.")


def rules_text(paper: str, tested: int, margins: list[tuple[str, float]], informative_margin: float) -> str:
    """The rules the claims section applies: ``margins`` the (key, margin) of its claims of "matches or beats"."""
    margin = "; ".join(f"({key}) {_points(m)}" for key, m in margins)
    return (
        f"Each claim of the paper ({paper}) is one test, fixed before any score is read. A pretrained model's "
        "score is its test mean at each task's best LR (by validation) averaged as the paper averages: over each "
        f"family's informative tasks, then over the families. The unit of every test is the {UNIT}: models that "
        "share a trunk (the splits branched from one CLM run, a run's continuations and early checkpoints) are not "
        "independent, so each side's models are averaged per seed of their trunk, one value per seed. Where the "
        "two sides hold different trunks (every claim below whose test line says *seed means permuted*), the test "
        "is the exact two-sided permutation test of the difference of the sides' seed means; where a trunk has "
        "models on both sides (*sign of each seed's difference flipped*), the sides are paired by seed and the "
        "test is the exact sign-flip test over the seeds' differences. Both hold their level whatever the scores' "
        "distribution (bimodal included) at any number of seeds, which Welch's t-test does not promise for scores "
        "that jump between two values. A difference is signed so that > 0 is the paper's direction. Holm's method "
        f"runs over the {tested} testable claim{'s' if tested != 1 else ''} (not over tasks); **significant** = "
        f"Holm-adjusted p < {LEVEL:g}. Each interval is at the confidence of the Holm step that decided its claim "
        f"(1 − {LEVEL:g}/m, m the claims still in play), so it excludes the null value exactly when the claim is "
        "significant. A claim is *supported* where its test is significant in the paper's direction, "
        "*contradicted* where against it, *not distinguishable at this scale* where neither, and *not testable "
        f"with N seeds* where the test cannot give p < {LEVEL:g} with the seeds it has (3 against 3: at best "
        "p = 0.1; 5 paired seeds: 2/32), whatever they score. A claim *at the permutation floor* can reach its Holm "
        "step's level only with its most extreme arrangement (every seed of one side above every seed of the "
        "other), the smallest p-value its seeds allow. Each verdict names the scale it was reached at: the "
        "compared models' pretraining tokens, layers and seeds."
        + (f" A claim of \"matches or beats\" is a non-inferiority test with its table's margin ({margin}): the "
           "null is that the claimed arms are worse by the margin, and it is supported only when they are shown "
           "to be less than the margin worse; a difference that is merely not significant never counts as "
           "matching." if margins else "")
        + f" The stability claim compares stability losses on a grid of at least {STABILITY_MIN_LRS} fine-tuning "
        "LRs: a model's test score at its best LR (by validation) minus its mean test score at the grid's other "
        "LRs, per task, averaged as the paper averages (absolute points, not relative to any gain over random "
        "init); it is tested only where every compared arm's best LR (its models' mean validation score) is "
        "inside the grid on every informative task, since a best LR at the grid's edge leaves the loss on one side "
        "unmeasured. The per-family differences under each claim are descriptive and untested. "
        + informative_text(informative_margin))
