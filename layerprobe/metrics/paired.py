"""Paired comparisons on the same documents: the standard error, 95% interval and p-value of a change in a score,
from per-document values, and the correction for testing every layer of a sweep.

A score is a statistic of per-document values (`Statistic`): the mean of one value per document (accuracy, exact
match, F1 per question), a ratio of sums (kl and drift: a sum over a sequence's positions over its positions), or the
exponential of such a ratio (perplexity). A change is a contrast, the sum of coefficient x score over conditions
(pruned - unpruned; in `compare`, (new dP) - (old dP)), every condition scored on the same documents.

The rule: an interval never leaves the range its statistic can take. A score declares its range (`Statistic.low`,
`high`: ppl >= 1, kl >= 0, 0 <= drift <= 2); a change after - before is then a difference of two values in it.

- mean and ratio: the analytic paired standard error from each document's influence on the contrast (for a mean,
  the plain paired stderr sd(d) / sqrt(n)); documents may fall in strata (the subtasks of a group) with weights;
  the interval and p-value from Student's t with n - strata degrees of freedom. A ratio's change is linear in the
  sums and its t interval symmetric; where that could cross a bound the cases below apply.
- 0/1 scores (accuracy, exact match) averaged over every document alike: the p-value is McNemar's exact test on the
  documents whose answer changed; the t interval is kept beside it, and evaluation/records.py `bounded` replaces it
  by Newcombe's paired score interval (inside [-before, 1 - before] by construction) under 30 documents, with no
  document changed, or where it would leave that range.
- a ranged score (kl, drift) changed from a reference at its bound on every document (the unpruned model's kl and
  drift, 0 by definition, with no spread): the change is the after score, and its interval is the after score's on
  the scale g that maps the range onto the whole line (log(s - low); logit((s - low) / (high - low)) where the range
  is closed above), carried back: inside the range, never below 0. The p-value is the t test of the change on the
  raw scale (whether the score rises above 0 beyond the documents' spread); the interval never holds 0, so it is the
  p-value that decides.
- ppl (exp_ratio) in every contrast, and a ranged ratio (kl, drift) changed from a reference inside its range: the
  expanded percentile paired bootstrap interval (Hesterberg 2015). The same documents are resampled for every
  condition (within strata), seed 0, 2,000 resamples; the interval's ends are the k-th draw from either side, each
  the change on one resample of the documents, so each is a difference of two values the score takes (a ppl of at
  least 1 on both sides): no end needs a ppl below 1 or a kl below 0. k is the plain percentile's 50 widened for few
  documents: the level whose normal quantile is sqrt(n / df) x t_df's (the plug-in bootstrap's spread is too narrow
  by sqrt(df / n), and t's tails are longer), 11 of 2,000 on 8 documents, 37 on 30, 49 on 1,000; under 5 documents
  no draw is far enough out and there is no interval (NaN; the standard error and p-value stay, nothing is tested
  below 10 documents). The
  standard error is the draws' sd. The p-value is the paired t test (n - strata df, the analytic standard error) of
  the ratio of sums under the score: the mean NLL for ppl (two ppls are equal exactly when their mean NLLs are),
  kl and drift themselves. It tests the same null as the interval and agrees with it but at the margin (of 1,017
  random records of 10 to 39 documents 2.3% disagreed, each with p between 0.026 and 0.053 and the interval's
  nearer end within 7% of its width of 0; under 10 documents nothing is tested); a verdict needs both
  (evaluation/records.py `corrected`: Holm on the p-value and the interval leaving out 0). A p-value counted from
  the resamples would agree exactly but cannot go below about 1 / 2,000, or 0.003 on 30 documents once widened:
  Holm over a 30-layer sweep could then never flag a removal.
  Why the percentile interval and not a log scale carried back through the measured reference (lo = g^-1(g(after)
  - t sd) - before): that one treats the reference as known. It keeps every end above low - before, but it drops
  the reference's own noise, which a change carries wherever after and before differ by a factor: on 400
  synthetic sequences with ppl 20 -> 30 its standard error was 0.74 against the bootstrap's 0.98. The normal
  interval on the bootstrap's sd, used before, is symmetric where ppl is skewed: the committed SmolLM2 curve
  without layers 24-29 (ppl 24.35 -> 985,471 on 8 sequences) got -89,150 to +2.06e6, a lower end no resample gives
  (it needs a pruned ppl below 1); this interval is 3.4e5 to 3.1e6. What it does not do is stay above 1 - before
  for the measured before: the bound holds for the change from the true reference, and a reference measured on few
  sequences is itself uncertain. Healing SmolLM2 without layer 29 (ppl 272.9 unhealed on 8 sequences, whose own
  interval reaches 762) changes ppl by -185.7, -566 to -65: the lower end is the change on resamples whose unhealed
  ppl is that high, never a healed ppl below 1.
- a contrast of more than two conditions (`compare`'s change of a dP) can take any value: exp_ratio takes the same
  bootstrap interval and test, ratio the analytic t.

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
    low: float = -math.inf  # the least a condition's score can be (ppl 1, kl and drift 0); -inf: no bound
    high: float = math.inf  # the most (drift 2); inf: none


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
    """Each document's first-order contribution to the score's deviation (its influence, over n); exp_ratio: the
    ratio's times the score (d exp(r) = exp(r) dr)."""
    if stat.kind in ("ratio", "exp_ratio"):
        ratio = value.sum() / tokens.sum()
        psi = (value - ratio * tokens) / tokens.sum()
        return psi * math.exp(ratio) if stat.kind == "exp_ratio" else psi
    out = np.empty(len(value), dtype=float)
    labels = np.unique(strata)
    for s in labels:
        inside = strata == s
        weight = (inside.sum() / len(value)) if stat.weights is None else stat.weights.get(s, 0.0)
        out[inside] = weight * (value[inside] - value[inside].mean()) / inside.sum()
    return out


def _variance(psi: np.ndarray, strata: np.ndarray) -> float:
    """The stratified variance of a sum of influences: sum over strata of n_s / (n_s - 1) x sum psi^2."""
    labels, counts = np.unique(strata, return_counts=True)
    return sum(n / (n - 1) * float((psi[strata == s] ** 2).sum()) for s, n in zip(labels, counts))


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
    scores = [score(stat, strata, v, t) for v, t in zip(values, tokens)]
    ranged = stat.kind != "mean" and math.isfinite(stat.low) and sorted(coefficients) == [-1.0, 1.0]
    if ranged and not stat.low < scores[list(coefficients).index(-1.0)] < stat.high:
        return _from_bound(stat, strata, values, coefficients, tokens)
    if stat.kind == "exp_ratio" or ranged:
        return _percentile(stat, strata, values, coefficients, tokens, delta, scores)
    psi = sum(c * _influence(stat, strata, v, t) for c, v, t in zip(coefficients, values, tokens))
    stderr, df = math.sqrt(_variance(psi, strata)), float(len(strata) - len(labels))
    if float_zero(delta, stderr, scores):
        return Interval(0.0, 0.0, 0.0, 0.0, 1.0)
    half = _quantile(df) * stderr
    return Interval(delta, stderr, delta - half, delta + half, _p_value(delta, stderr, df))


def _to_scale(stat: Statistic, s: float) -> float:
    """g(s): the score's range onto the whole line: log(s - low), or logit((s - low) / (high - low))."""
    if math.isinf(stat.high):
        return math.log(s - stat.low)
    return math.log((s - stat.low) / (stat.high - s))


def _slope(stat: Statistic, s: float) -> float:
    """g'(s)."""
    if math.isinf(stat.high):
        return 1.0 / (s - stat.low)
    return (stat.high - stat.low) / ((s - stat.low) * (stat.high - s))


def _from_scale(stat: Statistic, y: float) -> float:
    """g^-1(y), inside (low, high) for every finite y (an overflow lands on the bound it tends to)."""
    if math.isinf(stat.high):
        return stat.low + (math.exp(y) if y < 709 else math.inf)
    width = stat.high - stat.low
    return stat.low + (width / (1 + math.exp(-y)) if y >= 0 else width * math.exp(y) / (1 + math.exp(y)))


def _from_bound(stat: Statistic, strata: np.ndarray, values: list, coefficients: Sequence[float],
                tokens: list) -> Interval:
    """after - before where before sits at its bound on every document (kl or drift of the unpruned model, 0 by
    definition, with no spread): the interval of the after score on g's scale, the p-value the t test of the change
    on the raw scale (module docstring)."""
    before, after = (list(coefficients).index(c) for c in (-1.0, 1.0))
    sb, sa = (score(stat, strata, values[k], tokens[k]) for k in (before, after))
    psi = _influence(stat, strata, values[after], tokens[after]) - _influence(stat, strata, values[before],
                                                                              tokens[before])
    df = float(len(strata) - len(np.unique(strata)))
    raw = math.sqrt(_variance(psi, strata))
    if float_zero(sa - sb, raw, [sb, sa]):
        return Interval(0.0, 0.0, 0.0, 0.0, 1.0)
    if not stat.low < sa < stat.high:  # after at a bound too: no scale to work on
        return Interval.missing(sa - sb)
    y, sd, q = _to_scale(stat, sa), _slope(stat, sa) * raw, _quantile(df)
    lo, hi = _from_scale(stat, y - q * sd) - sb, _from_scale(stat, y + q * sd) - sb
    return Interval(sa - sb, raw, lo, hi, _p_value(sa - sb, raw, df))


def _expanded_ends(n: int, df: float, resamples: int) -> int:
    """How many draws from either side a 95% expanded percentile interval ends at (Hesterberg 2015): the percentile
    interval at the level whose normal quantile is sqrt(n / df) x Student's t quantile with df degrees of freedom
    (the plug-in bootstrap's spread is too narrow by sqrt(df / n), and t's tails are longer than the normal's), so on
    few documents it widens as a t interval does; 50 of 2,000 as n grows. 0 under 5 documents: no draw is that far,
    and there is no interval."""
    from scipy import stats

    z = math.sqrt(n / df) * _quantile(df)
    return int(math.floor(resamples * float(stats.norm.sf(z)) + 1e-9))


def _percentile(stat: Statistic, strata: np.ndarray, values: list, coefficients: Sequence[float], tokens: list,
                delta: float, scores: list[float]) -> Interval:
    """The expanded percentile paired bootstrap interval and the t test of the ratio of sums under the score (module
    docstring); the standard error the draws' standard deviation."""
    draws = _draws(stat, strata, values, coefficients, tokens)
    stderr = float(draws.std(ddof=1))
    if float_zero(delta, stderr, scores):
        return Interval(0.0, 0.0, 0.0, 0.0, 1.0)
    n, df = len(strata), float(len(strata) - len(np.unique(strata)))
    ordered = np.sort(draws)
    k = _expanded_ends(n, df, len(draws))
    lo, hi = (math.nan, math.nan) if k == 0 else (ordered[k - 1], ordered[-k])
    ratio = Statistic("ratio")  # ppl's mean NLL: ppl_a = ppl_b exactly when the mean NLLs are equal
    change = sum(c * score(ratio, strata, v, t) for c, v, t in zip(coefficients, values, tokens))
    psi = sum(c * _influence(ratio, strata, v, t) for c, v, t in zip(coefficients, values, tokens))
    return Interval(delta, stderr, float(lo), float(hi), _p_value(change, math.sqrt(_variance(psi, strata)), df))


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


def _draws(stat: Statistic, strata: np.ndarray, values: list, coefficients: Sequence[float],
           tokens: list) -> np.ndarray:
    """(RESAMPLES,): the contrast on paired resamples of the documents (every condition resampled with the same
    documents)."""
    rows = resample_indices(strata)
    draws = np.zeros(len(rows))
    for c, v, t in zip(coefficients, values, tokens):
        ratio = v[rows].sum(axis=1) / t[rows].sum(axis=1)
        draws += c * (np.exp(ratio) if stat.kind == "exp_ratio" else ratio)
    return draws


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
