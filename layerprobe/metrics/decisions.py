"""The tests behind the sentences a run prints: how small a change it could see (minimum detectable effect), how many
documents a non-inferiority verdict would need, whether a score can be told from chance (exact binomial), intervals
that never have a zero width (Wilson, Newcombe's paired interval), and a bootstrap over layers of the difference of
two Spearman correlations.

numpy and scipy.stats only; no IO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from layerprobe.metrics.paired import ALPHA, LEVEL, RESAMPLES, SEED, float_zero

POWER = 0.8  # the power a minimum detectable effect is stated at
MIN_DOCUMENTS = 10  # below this many documents (or sequences) a run ranks but does not test
SMALL = 30  # under this many documents, or a 0/1 score at 0 or 1, an accuracy's interval is Wilson's / Newcombe's
ONE_SIDED = 0.5 + LEVEL / 2  # the level of a one-sided verdict on the worse end of a two-sided 95% interval


def _z(p: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(p))


def detectable(stderr: float, family: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true change a two-sided test at alpha / family (Bonferroni, Holm's worst step) detects with
    `power`, for a change measured with standard error `stderr` (normal): (z_{1 - a/2m} + z_power) * stderr."""
    if not (stderr == stderr and stderr >= 0) or family < 1:
        return math.nan
    return (_z(1 - alpha / (2 * family)) + _z(power)) * stderr


def documents_needed(delta: float, stderr: float, documents: int, margin: float, higher: bool = True) -> int | None:
    """How many documents a non-inferiority verdict (the worse end of the two-sided 95% interval inside `margin`,
    margin > 0: how far the score may fall) would need if the observed change `delta` and the per-document spread held:
    the standard error shrinks as 1 / sqrt(n). None where the observed change itself is outside the margin (no
    number of documents helps), or there is no spread to scale."""
    room = margin + (delta if higher else -delta)  # how far the worse end may sit from the point
    if not (stderr == stderr and stderr > 0 and documents > 0) or room <= 0:
        return None
    return max(documents, math.ceil(documents * (_z(ONE_SIDED) * stderr / room) ** 2))


@dataclass(frozen=True)
class Chance:
    """An exact two-sided binomial test of `correct` of `n` documents against the chance rate."""

    correct: int
    n: int
    chance: float
    p: float

    @property
    def distinguishable(self) -> bool:
        return self.p <= ALPHA


def chance_test(correct: int, n: int, chance: float) -> Chance:
    from scipy import stats

    return Chance(int(correct), int(n), float(chance), float(stats.binomtest(int(correct), int(n), chance).pvalue))


def wilson(correct: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of a proportion correct / n (never of zero width, inside [0, 1])."""
    z = _z(0.5 + level / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_paired(before: Sequence[float], after: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Newcombe's (1998, method 10) score interval for the change of a paired 0/1 score (mean(after) -
    mean(before)): Wilson intervals of both proportions combined with the pairs' phi correlation. It has a width at
    0% or 100% or with no document changed, where the plain paired stderr is 0."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    n = len(before)
    a = float(((after == 1) & (before == 1)).sum())  # the 2 x 2 table, 'after' as the first proportion
    b = float(((after == 1) & (before == 0)).sum())
    c = float(((after == 0) & (before == 1)).sum())
    d = float(n - a - b - c)
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson(a + b, n, level)
    l2, u2 = wilson(a + c, n, level)
    denominator = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(denominator) if denominator > 0 else 0.0
    delta = p1 - p2
    lo = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = delta + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return max(lo, -p2), min(hi, 1 - p2)  # the change of a proportion that starts at p2 lies in [-p2, 1 - p2]


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks of each row (ties share their mean rank), rows of a (resamples, n) array."""
    from scipy import stats

    return stats.rankdata(x, axis=-1)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    rx, ry = _ranks(x), _ranks(y)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis=-1) / denominator


@dataclass(frozen=True)
class SpearmanDifference:
    """rho(a, cost) - rho(b, cost) with a percentile bootstrap interval over layers (the same layers resampled for
    both signals)."""

    difference: float
    lo: float
    hi: float
    resamples: int
    seed: int

    @property
    def separates(self) -> bool:
        return self.lo > 0 or self.hi < 0


def spearman_difference(a: Sequence[float], b: Sequence[float], cost: Sequence[float], resamples: int = RESAMPLES,
                        seed: int = SEED) -> SpearmanDifference:
    """The difference of two signals' Spearman correlations with one cost, its 95% interval from `resamples`
    resamples of the layers with replacement (numpy's default_rng(seed); a resample where either correlation is
    undefined, a constant column, is left out)."""
    a, b, cost = (np.asarray(v, dtype=float) for v in (a, b, cost))
    point = float(_spearman_rows(a[None], cost[None])[0] - _spearman_rows(b[None], cost[None])[0])
    rows = np.random.default_rng(seed).integers(0, len(cost), size=(resamples, len(cost)))
    draws = _spearman_rows(a[rows], cost[rows]) - _spearman_rows(b[rows], cost[rows])
    draws = draws[np.isfinite(draws)]
    lo, hi = (float(np.quantile(draws, q)) for q in (0.5 - LEVEL / 2, 0.5 + LEVEL / 2))
    return SpearmanDifference(point, lo, hi, resamples, seed)


MIN_CLUSTERS = 10  # --cluster subtask: fewer subtasks than this keep the stratified interval (t with G - 1 df
# on a handful of clusters is unreliable: Cameron and Miller 2015), and the summary says so


def clustered_mean_change(before: Sequence[float], after: Sequence[float], clusters: Sequence,
                          weights: Sequence[float] | None = None) -> tuple[float, float, float, float, float]:
    """(change, stderr, lo, hi, p) of the weighted mean of (after - before), weights v_i (None: every document alike;
    normalized to sum 1), with a cluster-robust (CR1) standard error: documents in one cluster (an MMLU subject,
    sharing its few-shot prefix) may be correlated. That is weighted least squares on a constant:
    Var = G / (G - 1) x sum_g (sum_{i in g} v_i (d_i - change))^2; the interval and p from Student's t with G - 1
    degrees of freedom. A change within float rounding of the scores is exactly 0 ([0, 0], p 1); a zero stderr of
    a real change (every cluster moved alike) gives no interval and no p (NaN): it is not a test."""
    from scipy import stats

    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    v = np.full(len(d), 1.0) if weights is None else np.asarray(weights, dtype=float)
    v = v / v.sum()
    labels = np.asarray(clusters)
    groups = np.unique(labels)
    g = len(groups)
    mean = float((v * d).sum())
    if g < 2:
        return mean, math.nan, math.nan, math.nan, math.nan
    sums = np.array([(v[labels == c] * (d[labels == c] - mean)).sum() for c in groups])
    stderr = math.sqrt(g / (g - 1) * float((sums ** 2).sum()))
    levels = [float((v * np.asarray(x, dtype=float)).sum()) for x in (before, after)]
    if float_zero(mean, stderr, levels):  # float rounding, not a change (paired.float_zero)
        return 0.0, 0.0, 0.0, 0.0, 1.0
    if not stderr > 0:  # every cluster moved alike: a zero stderr is no evidence of precision, so no interval
        return mean, stderr, math.nan, math.nan, math.nan
    q = float(stats.t.ppf(0.5 + LEVEL / 2, g - 1))
    p = float(2 * stats.t.sf(abs(mean) / stderr, g - 1))
    return mean, stderr, mean - q * stderr, mean + q * stderr, p
