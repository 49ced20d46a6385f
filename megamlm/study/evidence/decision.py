"""The decision rule of a claims section: one pre-registered test per claim, Holm's correction over the claims,
and intervals adjusted the same way as the p-values.

Each claim is one comparison of two samples of per-model values (``ClaimSample``), one value per pretrained
model: its downstream score averaged as the paper averages (per family over the informative tasks, then over the
families), or, for the stability claim, its relative stability loss. The difference of means is signed so that
> 0 is the paper's direction, and its null value is 0, or −margin for a claim of "matches or beats".

The test is the exact two-sample permutation test of the difference of means over the models' labels
(``permutation.py``), two-sided. Why not Welch's t-test: its level rests on near-normal means, which 3 or 5
scores that jump between two values (a model finds a task's cue or does not) are not; its error rate then
depends on the odds and the noise and nothing bounds it (a single Welch test on two-point scores with a little
noise rejected in 1.4-3.3% of samples at 3 and 5 seeds here, and tables of many such tests called something
significant in 81% of bimodal studies). The permutation test needs only that, under the null, the
labels are exchangeable, so it holds its level for normal, two-point or any other scores at any number of seeds
(tests/unit/study/test_claim_simulation.py checks this by simulation at 3 and 5 seeds). Its price is
granularity: with N relabellings no p-value falls below 2/N; 3 models against 3 give at best p = 0.1, so such
a claim can never be significant and is reported "not testable with 3 seeds" instead of with a verdict (and
left out of Holm's family, where it could only cost the others power).

"Matches or beats" is a non-inferiority test: H0 is that the claimed arm is worse by the margin (difference =
−margin); the claim is supported only when that is rejected in the upper direction, i.e. the claimed arm is
shown to be less than ``margin`` points worse. Not rejecting a difference of 0 never counts as "matches". It is
contradicted when the difference is shown to be below −margin. The two-sided test at 5% is the usual one-sided
non-inferiority test at 2.5%.

Holm's step-down method runs over the claims that have a test (not over tasks, which stay descriptive): the
family-wise error over the section is at most 5%. Each claim's interval is at the confidence level of the Holm
step at which it was decided, 1 − 0.05/m with m the number of claims still in play at that step (a significant
claim's own step; for the others, the first step that did not reject): it excludes the null value exactly when
the Holm-adjusted p-value is below 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megamlm.eval.metrics import SIGNIFICANCE, holm
from megamlm.study.evidence.permutation import permutation_interval, permutation_test, smallest_p

FAVOUR, AGAINST, NEITHER = 1, -1, 0
"""A claim's decision: significant in the paper's direction, against it, or neither."""


@dataclass
class ClaimSample:
    """One claim's two samples over the last axis (leading axes: independent replicates, e.g. simulated
    studies), signed so that mean(a) − mean(b) > 0 is the paper's direction, and the difference under H0."""
    a: np.ndarray
    b: np.ndarray
    null: float = 0.0

    @property
    def testable(self) -> bool:
        """Whether some outcome could be significant: the smallest attainable p-value is below the level."""
        return smallest_p(self.a.shape[-1], self.b.shape[-1]) < SIGNIFICANCE


@dataclass
class Decisions:
    """Per claim (last axis): the difference of means, the raw and Holm-adjusted p-values (NaN: not testable),
    the decision (FAVOUR, AGAINST, NEITHER) and the level of the Holm step that decided it."""
    difference: np.ndarray
    p_value: np.ndarray
    adjusted: np.ndarray
    decision: np.ndarray
    level: np.ndarray


def holm_levels(p_values: np.ndarray, alpha: float = SIGNIFICANCE) -> np.ndarray:
    """Per test (last axis), the level Holm's step-down method compared it with: alpha / (m − i) at the i-th
    smallest p-value for the rejected ones, and for the rest that of the first step that did not reject. NaN p
    (not tested) gets NaN."""
    p = np.asarray(p_values, dtype=float)
    tested = ~np.isnan(p)
    m = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1)
    ranked = np.take_along_axis(p, order, axis=-1)
    step = np.arange(p.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        thresholds = alpha / (m - step)
        below = np.where(step < m, ranked < thresholds, False)
        rejected = np.cumprod(below, axis=-1).astype(bool)  # step-down: stops at the first that is not below
        first_kept = rejected.sum(axis=-1, keepdims=True)
        ranked_level = np.where(rejected, thresholds, alpha / (m - first_kept))
    levels = np.empty_like(p)
    np.put_along_axis(levels, order, ranked_level, axis=-1)
    return np.where(tested, levels, np.nan)


def decide(samples: list[ClaimSample], alpha: float = SIGNIFICANCE) -> Decisions:
    """Test each claim, Holm-adjust over the testable ones, and decide each (over any leading replicate axes)."""
    differences, p_values = [], []
    for s in samples:
        difference, p = permutation_test(s.a, s.b, s.null)
        differences.append(difference)
        p_values.append(p if s.testable else np.full(np.shape(difference), np.nan))
    difference, p = np.stack(differences, axis=-1), np.stack(p_values, axis=-1)
    adjusted = holm(p)
    nulls = np.array([s.null for s in samples])
    significant = np.nan_to_num(adjusted, nan=1.0) < alpha
    decision = np.where(significant, np.where(difference > nulls, FAVOUR, AGAINST), NEITHER)
    return Decisions(difference, p, adjusted, decision, holm_levels(p, alpha))


def interval(sample: ClaimSample, level: float) -> tuple[float, float]:
    """The difference's interval at confidence 1 − ``level`` (the Holm step's level), one claim's 1-D samples."""
    return permutation_interval(sample.a, sample.b, level)
