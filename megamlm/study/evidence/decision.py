"""The decision rule of a claims section: one pre-registered test per claim, Holm's correction over the claims,
and intervals adjusted the same way as the p-values.

Each claim is one comparison of two samples of per-unit values (``ClaimSample``). The unit is the pretraining
seed, the unit of independence: models that share a trunk (the splits branched from one CLM run, a run's
continuations, its early checkpoints) are not independent replicates, so each side's models are first averaged per
seed of their trunk (``unit_sample``), and a side contributes one value per seed. A model's value is its
downstream score averaged as the paper averages (per family over the informative tasks, then over the families),
or, for the stability claim, its loss away from the best LR. The difference of means is signed so that > 0 is the
paper's direction, and its null value is 0, or −margin for a claim of "matches or beats".

The test is exact and two-sided (``permutation.py``). Where the two sides hold models of different trunks (every
claim of the paper's table: MLM against CLM, splits of a CLM run against MLM, continuations of a CLM parent against
those of an MLM parent), the seed means of the two sides are independent and the test permutes them between the
sides (two-sample permutation test). Where the design pairs the sides by seed (some trunk has models on both
sides, e.g. a split against the CLM run it branched from), the seed means of one seed are not independent of each
other and the test flips the sign of each seed's difference instead (sign-flip test over the seeds both sides
have). Why not pool the models: pooled, the three splits of one trunk count as three independent replicates and
their shared trunk's luck as evidence; a simulation with shared trunks (tests/unit/study/test_claim_simulation.py)
shows the pooled test giving verdicts well above its level, the seed-level one not. Why not Welch's t-test: its
level rests on near-normal means, which 3 or 5 scores that jump between two values are not; the randomisation
tests need only exchangeability (or symmetry) under the null, so they hold their level for normal, two-point or
any other scores at any number of seeds (checked by the same simulation at 3 and 5 seeds). Their price is
granularity: with N arrangements no p-value falls below 2/N; 3 seeds against 3 give at best p = 0.1 and 5 paired
seeds 2/32, so such a claim can never be significant and is reported "not testable with N seeds" instead of with
a verdict (and left out of Holm's family, where it could only cost the others power). A claim that can reach its
Holm step's level only with the most extreme arrangement (p = 2/N) is *at the permutation floor*, and the report
says so (``at_floor``).

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

from megamlm.eval.metrics import holm
from megamlm.study.evidence.permutation import (
    permutation_interval,
    permutation_test,
    sign_flip_interval,
    sign_flip_test,
    smallest_p,
    smallest_p_paired,
)
from megamlm.study.evidence.rules import LEVEL

FAVOUR, AGAINST, NEITHER = 1, -1, 0
"""A claim's decision: significant in the paper's direction, against it, or neither."""


PERMUTED, SIGN_FLIPPED = "seed means permuted between the sides", "sign of each seed's difference flipped"
"""How a claim's test rearranges its units: independent sides, or sides paired by seed."""


@dataclass
class ClaimSample:
    """One claim's two samples of per-seed values over the last axis (leading axes: independent replicates, e.g.
    simulated studies), signed so that mean(a) − mean(b) > 0 is the paper's direction, and the difference under H0.
    ``paired``: a[..., i] and b[..., i] are the same seed's (then of equal length) and the test flips signs."""
    a: np.ndarray
    b: np.ndarray
    null: float = 0.0
    paired: bool = False
    seeds: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    """The seeds behind a's and b's values, in order (for the report; empty in simulations)."""

    @property
    def smallest_p(self) -> float:
        """The smallest two-sided p-value the claim's test can give: its permutation floor, 2/N."""
        if self.paired:
            return smallest_p_paired(self.a.shape[-1])
        return smallest_p(self.a.shape[-1], self.b.shape[-1])

    @property
    def testable(self) -> bool:
        """Whether some outcome could be significant: the smallest attainable p-value is below the level."""
        return self.smallest_p < LEVEL

    @property
    def design(self) -> str:
        return SIGN_FLIPPED if self.paired else PERMUTED

    def test(self) -> tuple[np.ndarray, np.ndarray]:
        """(difference of means, two-sided p) by the sign-flip test where paired, else the permutation test."""
        return (sign_flip_test if self.paired else permutation_test)(self.a, self.b, self.null)


def unit_sample(a, a_units, b, b_units, null: float = 0.0, paired: bool = False) -> ClaimSample:
    """A claim's sample from per-model values: ``a`` (..., n_a models) with each model's unit (the seed of its
    trunk) in ``a_units``, the same for ``b``. Each side's models of one unit are averaged into that unit's value;
    ``paired``: only the units both sides have are kept, in the same order, and their differences are tested by
    sign flips. Leading axes of the values (simulated studies) are kept."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a_units, b_units = list(a_units), list(b_units)
    units_a, units_b = sorted(set(a_units)), sorted(set(b_units))
    if paired:
        units_a = units_b = [u for u in units_a if u in set(units_b)]

    def means(values, units, keep):
        index = np.array(units)
        columns = [values[..., index == u].mean(axis=-1) for u in keep]
        return np.stack(columns, axis=-1) if columns else values[..., :0]
    return ClaimSample(means(a, a_units, units_a), means(b, b_units, units_b), null, paired,
                       (tuple(units_a), tuple(units_b)))


@dataclass
class Decisions:
    """Per claim (last axis): the difference of means, the raw and Holm-adjusted p-values (NaN: not testable),
    the decision (FAVOUR, AGAINST, NEITHER) and the level of the Holm step that decided it."""
    difference: np.ndarray
    p_value: np.ndarray
    adjusted: np.ndarray
    decision: np.ndarray
    level: np.ndarray


def holm_levels(p_values: np.ndarray, alpha: float = LEVEL) -> np.ndarray:
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


def decide(samples: list[ClaimSample], alpha: float = LEVEL) -> Decisions:
    """Test each claim, Holm-adjust over the testable ones, and decide each (over any leading replicate axes)."""
    differences, p_values = [], []
    for s in samples:
        difference, p = s.test()
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
    return (sign_flip_interval if sample.paired else permutation_interval)(sample.a, sample.b, level)


def at_floor(sample: ClaimSample, level: float) -> bool:
    """Whether the claim's test can reach ``level`` (its Holm step's) only with its most extreme arrangement:
    the floor 2/N is below the level, the next attainable p-value (4/N) is not."""
    return sample.smallest_p < level <= 2 * sample.smallest_p
