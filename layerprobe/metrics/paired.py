"""Paired comparisons on the same documents: the standard error, 95% interval and p-value of a change in a score,
from per-document values, and the correction for testing every layer of a sweep.

A score is a statistic of per-document values (`Statistic`): the mean of one value per document (accuracy, exact
match, F1 per question), a ratio of sums (kl and drift: a sum over a sequence's positions over its positions), or the
exponential of such a ratio (perplexity). A change is a contrast, the sum of coefficient x score over conditions
(pruned - unpruned; in `compare`, (new dP) - (old dP)), every condition scored on the same documents.

- mean and ratio: the analytic paired standard error from each document's influence on the contrast (for a mean,
  the plain paired stderr sd(d) / sqrt(n)); documents may fall in strata (the subtasks of a group) with weights;
  the interval and p-value from Student's t with n - strata degrees of freedom.
- 0/1 scores (accuracy, exact match) averaged over every document alike: the p-value is McNemar's exact test on the
  documents whose answer changed (the t interval is kept beside it).
- exp_ratio: a paired bootstrap over documents (the same documents resampled for every condition, within strata),
  seed 0, 2,000 resamples; its standard deviation is the standard error, the interval and p-value are normal.

numpy and scipy.stats only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.95  # the intervals' coverage
ALPHA = 0.05  # the family-wise error rate the correction controls
CORRECTION = "holm"  # Holm's step-down correction over the variants of one metric (every layer of a sweep)
SEED = 0  # the bootstrap's fixed seed
RESAMPLES = 2000
NOISE = 1e-9  # relative: a change and its standard error both within NOISE x the scores' scale are exactly zero


@dataclass(frozen=True)
class Statistic:
    """How a score follows from per-document values: 'mean' of `value`, 'ratio' sum(total) / sum(tokens), or
    'exp_ratio' exp(sum(total) / sum(tokens)). Strata (one label per document, e.g. its subtask) and their weights
    (None: a document-weighted mean over all of them, lm-eval's weight_by_size)."""

    kind: str = "mean"
    weights: dict | None = None  # stratum -> weight of its mean (they sum to 1); None: every document alike


@dataclass(frozen=True)
class Interval:
    delta: float
    stderr: float
    lo: float
    hi: float
    p: float

    @classmethod
    def missing(cls, delta: float = math.nan) -> Interval:
        return cls(delta, math.nan, math.nan, math.nan, math.nan)


def score(stat: Statistic, strata: np.ndarray, value: np.ndarray, tokens: np.ndarray | None = None) -> float:
    """The score of one condition from its per-document values."""
    if stat.kind == "mean":
        if stat.weights is None:
            return float(value.mean())
        return float(sum(w * value[strata == s].mean() for s, w in stat.weights.items()))
    ratio = float(value.sum() / tokens.sum())
    return math.exp(ratio) if stat.kind == "exp_ratio" else ratio


def _influence(stat: Statistic, strata: np.ndarray, value: np.ndarray, tokens: np.ndarray | None) -> np.ndarray:
    """Each document's first-order contribution to the score's deviation (its influence, over n)."""
    if stat.kind == "ratio":
        ratio = value.sum() / tokens.sum()
        return (value - ratio * tokens) / tokens.sum()
    out = np.empty(len(value), dtype=float)
    labels = np.unique(strata)
    for s in labels:
        inside = strata == s
        weight = (inside.sum() / len(value)) if stat.weights is None else stat.weights.get(s, 0.0)
        out[inside] = weight * (value[inside] - value[inside].mean()) / inside.sum()
    return out


def _quantile(df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + LEVEL / 2, df)) if math.isfinite(df) else float(stats.norm.ppf(0.5 + LEVEL / 2))


def _p_value(delta: float, stderr: float, df: float) -> float:
    from scipy import stats

    if stderr == 0:
        return 1.0 if delta == 0 else 0.0
    z = abs(delta) / stderr
    return float(2 * (stats.t.sf(z, df) if math.isfinite(df) else stats.norm.sf(z)))


def contrast(stat: Statistic, strata: Sequence, values: Sequence[np.ndarray], coefficients: Sequence[float],
             tokens: Sequence[np.ndarray] | None = None) -> Interval:
    """The change sum_k c_k * score(condition k), every condition's values aligned on the same documents (one
    entry per document, `strata` its stratum), with its paired standard error, 95% interval and p-value."""
    strata = np.asarray(strata)
    values = [np.asarray(v, dtype=float) for v in values]
    tokens = [np.asarray(t, dtype=float) for t in tokens] if tokens is not None else [None] * len(values)
    delta = sum(c * score(stat, strata, v, t) for c, v, t in zip(coefficients, values, tokens))
    labels, counts = np.unique(strata, return_counts=True)
    if not len(counts) or counts.min() < 2 or not math.isfinite(delta):
        return Interval.missing(delta)  # a stratum of one document has no spread to estimate
    if stat.kind == "exp_ratio":
        stderr, df = _bootstrap_stderr(stat, strata, values, coefficients, tokens), math.inf
    else:
        psi = sum(c * _influence(stat, strata, v, t) for c, v, t in zip(coefficients, values, tokens))
        variance = sum(n / (n - 1) * float((psi[strata == s] ** 2).sum()) for s, n in zip(labels, counts))
        stderr, df = math.sqrt(variance), float(len(strata) - len(labels))
    if float_zero(delta, stderr, [score(stat, strata, v, t) for v, t in zip(values, tokens)]):
        return Interval(0.0, 0.0, 0.0, 0.0, 1.0)
    half = _quantile(df) * stderr
    return Interval(delta, stderr, delta - half, delta + half, _p_value(delta, stderr, df))


def float_zero(delta: float, stderr: float, scores: Sequence[float]) -> bool:
    """Whether a change is float rounding, not a measurement: the change and its standard error both within NOISE
    (1e-9, the precision the records must reproduce a score to) of the scale of the scores it is made of (at least
    1). Every choice moved by exactly the same amount leaves a margin change of ~1e-16 with a ~1e-17 standard error,
    an interval that excludes 0 and would be flagged; such a change is exactly 0, its interval [0, 0], p 1."""
    scale = max([1.0] + [abs(x) for x in scores if math.isfinite(x)])
    return abs(delta) <= NOISE * scale and (stderr != stderr or abs(stderr) <= NOISE * scale)


def resample_indices(strata: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, documents): each row the documents drawn with replacement, within each stratum (in the order of
    np.unique's labels), from one generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    rows = np.empty((resamples, len(strata)), dtype=np.int64)
    for s in np.unique(strata):
        where = np.flatnonzero(strata == s)
        rows[:, where] = where[rng.integers(0, len(where), size=(resamples, len(where)))]
    return rows


def _bootstrap_stderr(stat: Statistic, strata: np.ndarray, values: list, coefficients: Sequence[float],
                      tokens: list) -> float:
    """The standard deviation of the contrast over paired resamples of the documents (every condition resampled
    with the same documents)."""
    rows = resample_indices(strata)
    draws = np.zeros(len(rows))
    for c, v, t in zip(coefficients, values, tokens):
        ratio = v[rows].sum(axis=1) / t[rows].sum(axis=1)
        draws += c * (np.exp(ratio) if stat.kind == "exp_ratio" else ratio)
    return float(draws.std(ddof=1))


def mcnemar(before: np.ndarray, after: np.ndarray) -> float | None:
    """McNemar's exact two-sided p-value for paired 0/1 scores (the binomial test of the documents that changed:
    b went 1 -> 0, c went 0 -> 1, under p = 1/2), or None when the scores are not all 0 or 1."""
    from scipy import stats

    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if not (np.isin(before, (0.0, 1.0)).all() and np.isin(after, (0.0, 1.0)).all()):
        return None
    lost, gained = int(((before == 1) & (after == 0)).sum()), int(((before == 0) & (after == 1)).sum())
    if lost + gained == 0:
        return 1.0
    return float(min(1.0, 2 * stats.binom.cdf(min(lost, gained), lost + gained, 0.5)))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down: sorted p_(1) <= ... <= p_(m), reject while p_(i) <= alpha / (m - i + 1); a NaN p-value is
    never rejected and does not count in m."""
    known = [(p, i) for i, p in enumerate(p_values) if p == p]
    rejected = [False] * len(p_values)
    for rank, (p, i) in enumerate(sorted(known)):
        if p > alpha / (len(known) - rank):
            break
        rejected[i] = True
    return rejected


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values: sorted p_(1) <= ... <= p_(m), adj_(i) = max over j <= i of min(1, (m - j + 1) p_(j)),
    so a removal is significant at family-wise alpha exactly when its adjusted p <= alpha (what `holm` decides); a
    NaN p-value stays NaN and does not count in m."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    adjusted = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        adjusted[i] = running
    return adjusted
