"""An interval never leaves the range its statistic can take (metrics/paired.py): ppl >= 1, kl >= 0, 0 <= drift <= 2,
a 0/1 score's change inside [-before, 1 - before]. Checked against independent references: a hand-written bootstrap
loop (numpy's generator drawn document by document), scipy's t, and hand-built records whose normal interval crosses
the bound."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layerprobe.evaluation.records import add_intervals, bounded, statistic
from layerprobe.metrics.paired import Statistic, contrast

PPL, KL, DRIFT = (statistic(name)[1] for name in ("ppl", "kl", "drift"))


def _hand_draws(kind: str, conditions: list, coefficients: list, tokens: np.ndarray) -> list[float]:
    """The contrast on 2,000 paired resamples from default_rng(0) (one stratum): the generator's stream of document
    draws taken flat, n per resample in order, each resample's sums taken row by row. (test_paired.py's naive loop
    draws every document alone and sums in Python; here numpy sums, which keeps this reference fast for the 28
    contrasts below.)"""
    n = len(tokens)
    picks = np.random.default_rng(0).integers(0, n, size=2000 * n).reshape(2000, n)
    t = tokens[picks].sum(axis=1)
    out = np.zeros(2000)
    for c, values in zip(coefficients, conditions):
        ratio = np.asarray(values)[picks].sum(axis=1) / t
        out += c * (np.exp(ratio) if kind == "exp_ratio" else ratio)
    return out.tolist()


def _percentile_by_hand(draws: list[float], n: int) -> tuple[float, float]:
    """The expanded percentile interval (Hesterberg 2015) of 2,000 draws on n documents: the k-th draw from either
    side, k = floor(2000 x Phi(-sqrt(n / (n - 1)) x t_{n-1, 0.975})) by scipy."""
    k = math.floor(2000 * stats.norm.sf(math.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1)) + 1e-9)
    ordered = sorted(draws)
    return ordered[k - 1], ordered[-k]


def test_a_ppl_change_is_the_expanded_percentile_of_the_hand_loop_and_the_t_test_of_the_mean_nll():
    rng = np.random.default_rng(3)
    n = 30
    tokens = np.full(n, 48.0)
    before = tokens * rng.normal(3.0, 0.3, n)
    after = before + tokens * rng.normal(0.02, 0.1, n)
    got = contrast(PPL, ["s"] * n, [before, after], [-1, 1], [tokens, tokens])
    draws = _hand_draws("exp_ratio", [before, after], [-1, 1], tokens)
    assert got.delta == pytest.approx(math.exp(after.sum() / tokens.sum()) - math.exp(before.sum() / tokens.sum()),
                                      rel=1e-12)
    assert (got.lo, got.hi) == pytest.approx(_percentile_by_hand(draws, n), rel=1e-12)
    assert got.stderr == pytest.approx(np.std(draws, ddof=1), rel=1e-9)
    assert got.p == pytest.approx(stats.ttest_rel(after / tokens, before / tokens).pvalue, rel=1e-9)


def test_a_kl_change_from_a_nonzero_reference_is_the_percentile_too_and_so_is_a_ppl_change_of_dps():
    rng = np.random.default_rng(4)
    n = 14
    tokens = np.full(n, 50.0)
    before = tokens * rng.gamma(2.0, 0.2, n)
    after = before * rng.uniform(0.05, 0.9, n)
    got = contrast(KL, ["s"] * n, [before, after], [-1, 1], [tokens, tokens])
    assert (got.lo, got.hi) == pytest.approx(_percentile_by_hand(_hand_draws("ratio", [before, after], [-1, 1],
                                                                              tokens), n), rel=1e-12)
    assert got.p == pytest.approx(stats.ttest_rel(after / tokens, before / tokens).pvalue, rel=1e-9)
    assert got.lo > -before.sum() / tokens.sum()
    four = [tokens * rng.normal(3.0, 0.2, n) for _ in range(4)]
    got = contrast(PPL, ["s"] * n, four, [1, -1, -1, 1], [tokens] * 4)
    draws = _hand_draws("exp_ratio", four, [1, -1, -1, 1], tokens)
    assert (got.lo, got.hi) == pytest.approx(_percentile_by_hand(draws, n), rel=1e-12)
    d = (four[0] - four[1] - four[2] + four[3]) / tokens  # the mean NLLs' change of changes
    assert got.p == pytest.approx(stats.ttest_1samp(d, 0).pvalue, rel=1e-9)


def test_a_kl_change_from_the_unpruned_zero_is_the_pruned_kl_on_the_log_scale_and_drift_on_the_logit():
    """The unpruned kl is 0 on every sequence: the pruned kl's log-scale interval, its p the raw t test (scipy's
    one-sample t test of the per-sequence kls, every sequence the same length); drift, in [0, 2], on the logit."""
    rng = np.random.default_rng(13)
    n = 12
    tokens = np.full(n, 40.0)
    totals = tokens * rng.gamma(0.5, 0.4, n)
    got = contrast(KL, ["s"] * n, [np.zeros(n), totals], [-1, 1], [tokens, tokens])
    means = totals / tokens
    kl, se = means.mean(), stats.sem(means)
    q = stats.t.ppf(0.975, n - 1)
    assert (got.lo, got.hi) == pytest.approx((kl * math.exp(-q * se / kl), kl * math.exp(q * se / kl)), rel=1e-9)
    assert got.p == pytest.approx(stats.ttest_1samp(means, 0).pvalue, rel=1e-9) and got.lo > 0
    drift = tokens * np.array([1.99] * 11 + [1.0])  # near-opposite final states, one sequence less so
    got = contrast(DRIFT, ["s"] * n, [np.zeros(n), drift], [-1, 1], [tokens, tokens])
    d, se = (drift / tokens).mean(), stats.sem(drift / tokens)
    y, sd = math.log(d / (2 - d)), se * 2 / (d * (2 - d))  # logit(d / 2) and its slope x the stderr
    assert (got.lo, got.hi) == pytest.approx((2 / (1 + math.exp(-(y - q * sd))), 2 / (1 + math.exp(-(y + q * sd)))),
                                             rel=1e-9)
    assert d + q * se > 2 > got.hi  # the plain t interval would pass 2


def test_a_ppl_change_whose_normal_interval_crosses_ppl_1_stays_inside():
    """Eight sequences; one carries a pruned ppl of 1e6. The normal interval on the bootstrap's sd (the method used
    before, by hand) reaches below 1 - unpruned ppl, a pruned ppl below 1; the percentile interval does not, and
    every resample's pruned ppl is at least 1."""
    tokens = np.full(8, 128.0)
    before = tokens * np.array([3.0, 3.1, 3.2, 3.2, 3.3, 3.4, 3.1, 3.2])
    after = tokens * np.array([5.0, 5.5, 6.0, 6.5, 7.0, 8.0, 9.0, 16.0])
    draws = _hand_draws("exp_ratio", [before, after], [-1, 1], tokens)
    unpruned = math.exp(before.sum() / tokens.sum())
    delta = math.exp(after.sum() / tokens.sum()) - unpruned
    assert delta - 1.959964 * np.std(draws, ddof=1) < 1 - unpruned  # the record crosses the bound
    got = contrast(PPL, ["s"] * 8, [before, after], [-1, 1], [tokens, tokens])
    assert 1 - unpruned < got.lo < delta < got.hi and got.p < 0.05


@pytest.mark.parametrize("seed", range(8))
def test_every_end_is_a_change_some_resample_gives_and_the_p_value_points_the_same_way(seed):
    """Each end of a ppl, kl or drift change is a difference of two scores in the range (ppl >= 1, ...), and the
    p-value and the interval agree on 10 documents or more (fewer are not tested) wherever the interval's nearer end
    is not within a tenth of its width of 0."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    tokens = rng.integers(10, 60, n).astype(float)
    for stat, level in ((PPL, 3.0), (KL, 0.5), (DRIFT, 0.6)):
        before = tokens * rng.gamma(4.0, level / 4, n)
        after = np.clip(before + tokens * rng.normal(rng.normal(0, 0.05) * level, 0.15 * level, n), 1e-3 * tokens,
                        1.99 * tokens if stat is DRIFT else None)
        got = contrast(stat, ["s"] * n, [before, after], [-1, 1], [tokens, tokens])
        draws = _hand_draws(stat.kind, [before, after], [-1, 1], tokens)
        for end in (got.lo, got.hi):  # a draw's value (to float summation order)
            assert np.abs(np.asarray(draws) - end).min() <= 1e-9 * max(1.0, abs(end))
        if n >= 10 and min(abs(got.lo), abs(got.hi)) > 0.1 * (got.hi - got.lo):  # tested runs, off the margin
            assert (got.p < 0.05) == (got.lo > 0 or got.hi < 0), (stat.kind, got)


def test_an_accuracy_change_whose_t_interval_leaves_its_range_takes_newcombes():
    """50 questions, one right before and none after: the t interval (scipy) reaches below -0.02, a score below 0;
    the interval given stays inside [-0.02, 0.98]."""
    before = np.zeros(50)
    before[7] = 1.0
    after = np.zeros(50)
    d = after - before
    t_lo, _ = stats.t.interval(0.95, 49, d.mean(), stats.sem(d))
    assert t_lo < -0.02
    got = bounded(contrast(Statistic(), ["s"] * 50, [before, after], [-1, 1]), before, after, zero_one=True)
    assert -0.02 - 1e-15 <= got.lo < 0 < got.hi <= 0.98
    records = ([{"removed": "unpruned", "task": "t", "doc_id": i, "acc": b} for i, b in enumerate(before)]
               + [{"removed": "3", "task": "t", "doc_id": i, "acc": a} for i, a in enumerate(after)])
    table = pd.DataFrame([{"removed": "3", "layer": 3, "metric": "acc", "baseline": 0.02, "pruned": 0.0,
                           "delta": -0.02}])
    row = add_intervals(table, records, "t").iloc[0]
    assert row["delta_lo"] >= -0.02 - 1e-15 and row["delta_hi"] <= 0.98


def test_under_five_documents_the_bootstrap_gives_no_interval_but_keeps_its_test():
    """On 4 documents the expanded percentile would need a draw beyond the most extreme of 2,000 (scipy: 2,000 x
    Phi(-sqrt(4 / 3) t_3) < 1): no interval; the standard error and the t test of the mean NLL stay."""
    assert 2000 * stats.norm.sf(math.sqrt(4 / 3) * stats.t.ppf(0.975, 3)) < 1
    tokens = np.full(4, 20.0)
    before, after = tokens * np.array([3.0, 3.2, 2.9, 3.1]), tokens * np.array([3.4, 3.3, 3.5, 3.2])
    got = contrast(PPL, ["s"] * 4, [before, after], [-1, 1], [tokens, tokens])
    assert math.isnan(got.lo) and math.isnan(got.hi) and got.stderr > 0
    assert got.p == pytest.approx(stats.ttest_rel(after / tokens, before / tokens).pvalue, rel=1e-9)
