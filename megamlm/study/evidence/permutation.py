"""Exact randomisation tests of a difference of means, and their confidence intervals by inverting them: the
two-sample permutation test (independent units) and the sign-flip test (units paired by pretraining seed).

Both are one computation. The values are a vector x (two-sample: a's values then b's; paired: each unit's
difference a − b), the statistic of one rearrangement r is the weighted sum W_r · x (two-sample: a relabelling
into groups of the two sizes, weights 1/n_a and −1/n_b; paired: a choice of signs, weights ±1/n), and row 0 of W
is the observed arrangement. The null hypothesis is that the difference of means is ``null`` in the shift sense:
after ``a`` is moved by −``null`` (the ``shift`` entries of x) the arrangements are equally likely (two-sample:
the labels carry no information; paired: each unit's difference is symmetric about 0). Every arrangement is
enumerated while there are at most ``EXACT_LIMIT`` (C(n_a + n_b, n_a) relabellings, 2^n sign choices); past it,
the observed one and ``RANDOM_ARRANGEMENTS`` random ones from a fixed generator, which keeps the test valid. The
one-sided p-values count the arrangements at least as extreme as the observed one (ties included, with a small
tolerance for rounding, so ties make the test conservative, never liberal); the two-sided p-value is twice the
smaller, at most 1. Under the null it holds its level for any distribution of the values, normal, two-point or
other, at any number of units: P(p < level) <= level. Its cost is granularity: with N arrangements no p-value is
below 2/N (3 against 3 units: 2/20 = 0.1, so it cannot reject at 0.05; 5 against 5: 2/252; 5 pairs: 2/32).

The interval is the set of nulls the test does not reject at the given level. Each arrangement's statistic minus
the observed one is linear in the null, g_r + null · c_r with c_r >= 0 for both designs, so the set is an interval
whose ends are order statistics of the arrangements' crossing points −g_r / c_r, and it excludes a value exactly
when the test of that value rejects: the interval and the p-value never disagree.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations, product

import numpy as np

EXACT_LIMIT = 50_000
"""Arrangements enumerated exactly up to this many; beyond, a fixed random sample of them."""
RANDOM_ARRANGEMENTS = 19_999
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
    rows = np.zeros((RANDOM_ARRANGEMENTS + 1, n), dtype=bool)
    rows[0, :n_a] = True
    for i in range(1, RANDOM_ARRANGEMENTS + 1):
        rows[i, rng.choice(n, n_a, replace=False)] = True
    return rows


@lru_cache(maxsize=64)
def sign_flips(n: int) -> np.ndarray:
    """(N, n) signs ±1: every choice of signs of n paired differences (or a fixed random sample past
    ``EXACT_LIMIT``); the first row, all +1, is the observed one."""
    if 2 ** n <= EXACT_LIMIT:
        return np.array(list(product((1.0, -1.0), repeat=n))).reshape(-1, n)
    rng = np.random.default_rng(0)
    rows = np.where(rng.random((RANDOM_ARRANGEMENTS + 1, n)) < 0.5, -1.0, 1.0)
    rows[0] = 1.0
    return rows


@lru_cache(maxsize=64)
def _two_sample(n_a: int, n_b: int) -> tuple[np.ndarray, np.ndarray]:
    """(weights (N, n), shift (n,)) of the two-sample design."""
    weights = np.where(relabellings(n_a, n_b), 1.0 / n_a, -1.0 / n_b)
    return weights, np.r_[np.ones(n_a), np.zeros(n_b)]


@lru_cache(maxsize=64)
def _paired(n: int) -> tuple[np.ndarray, np.ndarray]:
    return sign_flips(n) / n, np.ones(n)


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value the two-sample test can give with these sample sizes."""
    return 1.0 if min(n_a, n_b) < 1 else min(1.0, 2.0 / len(relabellings(n_a, n_b)))


def smallest_p_paired(n: int) -> float:
    """The smallest two-sided p-value the sign-flip test can give with n pairs."""
    return 1.0 if n < 1 else min(1.0, 2.0 / len(sign_flips(n)))


def _p_values(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Two-sided p-values of the observed arrangement (row 0) over the leading axes of ``x`` (..., n)."""
    flat = x.reshape(-1, x.shape[-1])
    p = np.empty(len(flat))
    for start in range(0, len(flat), CHUNK):  # a few hundred studies at a time: bounded memory
        part = flat[start:start + CHUNK]
        every = part @ weights.T
        tolerance = 1e-9 * (1.0 + np.abs(part).max(axis=-1, keepdims=True))
        gap = every - every[:, :1]
        upper = (gap >= -tolerance).mean(axis=-1)
        lower = (gap <= tolerance).mean(axis=-1)
        p[start:start + CHUNK] = np.minimum(1.0, 2.0 * np.minimum(upper, lower))
    return p.reshape(x.shape[:-1])


def permutation_test(a, b, null: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(mean(a) − mean(b), two-sided p-value of H0: the difference is ``null``) by the two-sample permutation
    test, over the last axis; any leading axes (e.g. simulated studies) are tested independently. Fewer than one
    value in a sample: NaN p."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    difference = a.mean(axis=-1) - b.mean(axis=-1)
    if a.shape[-1] < 1 or b.shape[-1] < 1:
        return difference, np.full(np.shape(difference), np.nan)
    weights, _ = _two_sample(a.shape[-1], b.shape[-1])
    return difference, _p_values(np.concatenate([a - null, b], axis=-1), weights)


def sign_flip_test(a, b, null: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(mean(a − b), two-sided p-value of H0: the mean difference is ``null``) by the sign-flip test over pairs
    (a[..., i], b[..., i]), over the last axis; no pair: NaN p."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    differences = a - b
    difference = differences.mean(axis=-1) if differences.shape[-1] else np.full(differences.shape[:-1], np.nan)
    if differences.shape[-1] < 1:
        return difference, np.full(np.shape(difference), np.nan)
    weights, _ = _paired(differences.shape[-1])
    return difference, _p_values(differences - null, weights)


def _interval(x: np.ndarray, weights: np.ndarray, shift: np.ndarray, level: float) -> tuple[float, float]:
    """The nulls not rejected at ``level`` (module docstring): ``x`` the values at null 0."""
    delta = weights[1:] - weights[0]
    g, c = delta @ x, -(delta @ shift)
    g = np.where(np.abs(g) <= 1e-9 * (1.0 + np.abs(x).max()), 0.0, g)
    moving = c > 1e-12
    crossings = np.sort(-g[moving] / c[moving])
    total = len(weights)
    # accepted on the upper side while (1 + #crossings <= null) / N >= level / 2
    needed = max(math.ceil(level * total / 2 - 1e-9) - 1, 0)
    if needed == 0 or needed > len(crossings):
        return -math.inf, math.inf
    return float(crossings[needed - 1]), float(crossings[-needed])


def permutation_interval(a, b, level: float) -> tuple[float, float]:
    """The nulls the two-sided two-sample test does not reject at ``level`` (p >= level): an interval of the
    difference of means, (−inf, inf) where no p-value can fall below ``level``. One pair of 1-D samples."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    weights, shift = _two_sample(a.size, b.size)
    return _interval(np.concatenate([a, b]), weights, shift, level)


def sign_flip_interval(a, b, level: float) -> tuple[float, float]:
    """The nulls the two-sided sign-flip test does not reject at ``level``: an interval of the mean paired
    difference. One pair of 1-D samples of equal length."""
    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    weights, shift = _paired(differences.size)
    return _interval(differences, weights, shift, level)
