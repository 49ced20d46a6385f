"""The exact two-sample permutation test of a difference of means, and its confidence interval by inverting it.

The null hypothesis is that mean(a) − mean(b) is ``null`` in the shift sense: after ``a`` is moved by −``null``
the values of both samples are exchangeable (their labels carry no information). The test statistic is the
difference of means; its null distribution is the statistic under every relabelling of the pooled values into
groups of the two sizes (all C(n_a + n_b, n_a) of them, or, past ``EXACT_LIMIT``, the observed labelling and
``RANDOM_RELABELLINGS`` random ones from a fixed generator, which keeps the test valid). The one-sided p-values
count the relabellings at least as extreme as the observed one (ties included, with a small tolerance for
rounding, so ties make the test conservative, never liberal); the two-sided p-value is twice the smaller, at most
1. Under exchangeability the test holds its level for any distribution of the values, normal, two-point or
other, and any number of seeds: P(p < level) <= level. Its cost: with N relabellings no p-value is below 2/N
(3 against 3 values: 2/20 = 0.1, so it cannot reject at 0.05; 5 against 5: 2/252).

The interval is the set of nulls the test does not reject at the given level. Each relabelling's statistic
minus the observed one is linear in the null with a non-negative slope for the upper tail (non-positive for the
lower), so the set is an interval whose ends are order statistics of the relabellings' crossing points, and it
excludes a value exactly when the test of that value rejects: the interval and the p-value never disagree.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations

import numpy as np

EXACT_LIMIT = 50_000
"""Relabellings enumerated exactly up to this many; beyond, a fixed random sample of them."""
RANDOM_RELABELLINGS = 19_999
CHUNK = 128
"""Studies tested together (leading axes), so that memory stays bounded."""


@lru_cache(maxsize=64)
def relabellings(n_a: int, n_b: int) -> np.ndarray:
    """(N, n_a + n_b) booleans: True where a relabelling puts a pooled value (a's first, then b's) in group a.
    The first row is the observed labelling."""
    n = n_a + n_b
    if math.comb(n, n_a) <= EXACT_LIMIT:
        rows = np.zeros((math.comb(n, n_a), n), dtype=bool)
        for i, chosen in enumerate(combinations(range(n), n_a)):  # the first: 0..n_a-1, the observed one
            rows[i, list(chosen)] = True
        return rows
    rng = np.random.default_rng(0)
    rows = np.zeros((RANDOM_RELABELLINGS + 1, n), dtype=bool)
    rows[0, :n_a] = True
    for i in range(1, RANDOM_RELABELLINGS + 1):
        rows[i, rng.choice(n, n_a, replace=False)] = True
    return rows


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value the test can give with these sample sizes."""
    return 1.0 if min(n_a, n_b) < 1 else min(1.0, 2.0 / len(relabellings(n_a, n_b)))


def _statistics(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The observed difference (...,), every relabelling's difference (..., N), and how many of b's values each
    relabelling moves into group a (N,)."""
    n_a, n_b = a.shape[-1], b.shape[-1]
    rows = relabellings(n_a, n_b)
    weights = np.where(rows, 1.0 / n_a, -1.0 / n_b)  # (N, n): the difference of means as a weighted sum
    pooled = np.concatenate([a, b], axis=-1)
    every = pooled @ weights.T
    return every[..., 0], every, rows[:, n_a:].sum(axis=1)


def permutation_test(a, b, null: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(mean(a) − mean(b), two-sided p-value of H0: the difference is ``null``), over the last axis; any leading
    axes (e.g. simulated studies) are tested independently. Fewer than one value in a sample: NaN p."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    difference = a.mean(axis=-1) - b.mean(axis=-1)
    if a.shape[-1] < 1 or b.shape[-1] < 1:
        return difference, np.full(np.shape(difference), np.nan)
    flat_a, flat_b = (x.reshape(-1, x.shape[-1]) for x in (a - null, b))
    p = np.empty(len(flat_a))
    for start in range(0, len(flat_a), CHUNK):  # a few hundred studies at a time: bounded memory
        part_a, part_b = flat_a[start:start + CHUNK], flat_b[start:start + CHUNK]
        observed, every, _ = _statistics(part_a, part_b)
        tolerance = 1e-9 * (1.0 + np.abs(np.concatenate([part_a, part_b], axis=-1)).max(axis=-1, keepdims=True))
        gap = every - observed[:, None]
        upper = (gap >= -tolerance).mean(axis=-1)
        lower = (gap <= tolerance).mean(axis=-1)
        p[start:start + CHUNK] = np.minimum(1.0, 2.0 * np.minimum(upper, lower))
    return difference, p.reshape(np.shape(difference))


def permutation_interval(a, b, level: float) -> tuple[float, float]:
    """The nulls the two-sided test does not reject at ``level`` (p >= level): an interval of the difference of
    means, (−inf, inf) where no p-value can fall below ``level``. One pair of 1-D samples."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    observed, every, moved = _statistics(a, b)
    slope = moved * (1.0 / a.size + 1.0 / b.size)
    others = moved > 0
    gap = observed - every[others]
    gap = np.where(np.abs(gap) <= 1e-9 * (1.0 + np.abs(np.concatenate([a, b])).max()), 0.0, gap)
    crossings = np.sort(gap / slope[others])
    total = len(every)
    # accepted on the upper side while (1 + #crossings <= null) / N >= level / 2
    needed = max(math.ceil(level * total / 2 - 1e-9) - 1, 0)
    if needed == 0:
        return -math.inf, math.inf
    return float(crossings[needed - 1]), float(crossings[-needed])
