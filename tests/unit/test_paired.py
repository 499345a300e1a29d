"""Paired intervals and the correction against hand computations: the paired stderr and t interval written out, a
bootstrap with the same seed and resamples written naively, Holm applied by hand, McNemar's exact test on a
constructed 0/1 example, and the cases where the unpaired margin and the paired interval disagree."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layerprobe.evaluation import records as records_module
from layerprobe.metrics import paired
from layerprobe.metrics.paired import Statistic, contrast, holm, holm_adjusted, mcnemar


def test_paired_mean_interval_is_the_hand_computation():
    rng = np.random.default_rng(5)
    before = rng.normal(0.6, 0.2, 40)
    after = before - 0.05 + rng.normal(0, 0.03, 40)
    got = contrast(Statistic(), ["t"] * 40, [before, after], [-1, 1])
    d = [a - b for a, b in zip(after, before)]
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    se = sd / math.sqrt(len(d))
    q = stats.t.ppf(0.975, len(d) - 1)
    assert got.delta == pytest.approx(mean, rel=1e-12) and got.stderr == pytest.approx(se, rel=1e-12)
    assert (got.lo, got.hi) == pytest.approx((mean - q * se, mean + q * se), rel=1e-12)
    assert got.p == pytest.approx(2 * stats.t.sf(abs(mean) / se, len(d) - 1), rel=1e-9)


def test_stratified_mean_is_the_sum_of_each_strata_variance():
    """A group's document-weighted mean over subtasks: variance sum_t (n_t / N)^2 s_t^2 / n_t."""
    rng = np.random.default_rng(1)
    strata = np.array(["a"] * 10 + ["b"] * 30)
    d = np.where(strata == "a", rng.normal(-0.2, 0.1, 40), rng.normal(0.0, 0.3, 40))
    got = contrast(Statistic(), strata, [np.zeros(40), d], [-1, 1])
    var = sum((np.sum(strata == s) / 40) ** 2 * d[strata == s].var(ddof=1) / np.sum(strata == s) for s in "ab")
    assert got.delta == pytest.approx(d.mean()) and got.stderr == pytest.approx(math.sqrt(var), rel=1e-12)


def test_ratio_interval_is_the_plain_one_for_equal_lengths():
    """kl/drift: sum(total) / sum(tokens); with every sequence the same length it is the mean of per-sequence
    means, and its interval the paired one of those."""
    rng = np.random.default_rng(2)
    totals = rng.gamma(2.0, 3.0, 25)
    tokens = np.full(25, 64)
    got = contrast(Statistic("ratio"), ["x"] * 25, [np.zeros(25), totals], [-1, 1], [tokens, tokens])
    plain = contrast(Statistic(), ["x"] * 25, [np.zeros(25), totals / 64], [-1, 1])
    assert got.delta == pytest.approx(plain.delta, rel=1e-12) and got.stderr == pytest.approx(plain.stderr, rel=1e-12)


def test_bootstrap_is_the_naive_loop_with_the_same_seed():
    """ppl = exp(sum NLL / sum tokens): the stderr is the sd of the paired resampled differences and the interval
    their percentiles; the resamples drawn one by one from default_rng(SEED) give the same numbers."""
    rng = np.random.default_rng(3)
    n = 30
    tokens = rng.integers(40, 64, n).astype(float)
    base = tokens * rng.normal(3.0, 0.3, n)
    pruned = base + tokens * rng.normal(0.2, 0.1, n)
    got = contrast(Statistic("exp_ratio"), ["s"] * n, [base, pruned], [-1, 1], [tokens, tokens])
    draw = np.random.default_rng(paired.SEED)
    diffs = []
    for _ in range(paired.RESAMPLES):
        pick = [int(draw.integers(0, n)) for _ in range(n)]
        t = sum(tokens[i] for i in pick)
        diffs.append(math.exp(sum(pruned[i] for i in pick) / t) - math.exp(sum(base[i] for i in pick) / t))
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1))
    delta = math.exp(pruned.sum() / tokens.sum()) - math.exp(base.sum() / tokens.sum())
    assert got.delta == pytest.approx(delta, rel=1e-12) and got.stderr == pytest.approx(sd, rel=1e-9)
    ordered = sorted(diffs)  # the expanded percentile interval on 30 documents: the 37th draw from either side
    k = math.floor(2000 * stats.norm.sf(math.sqrt(30 / 29) * stats.t.ppf(0.975, 29)))
    assert k == 37 and (got.lo, got.hi) == pytest.approx((ordered[k - 1], ordered[-k]), rel=1e-12)


def test_holm_by_hand():
    p = [0.01, 0.04, 0.03, 0.005, float("nan"), 0.2]
    # by hand, m = 5 known: sorted 0.005 (<= 0.05/5 = 0.01 yes), 0.01 (<= 0.05/4 = 0.0125 yes),
    # 0.03 (<= 0.05/3 = 0.0167 no): stop
    assert holm(p) == [True, False, False, True, False, False]
    assert holm([0.001] * 3) == [True] * 3 and holm([]) == []


def test_holm_adjusted_by_hand_and_it_decides_as_holm_does():
    p = [0.01, 0.04, 0.03, 0.005, float("nan"), 0.2]
    # by hand, m = 5: 0.005 x 5 = 0.025; 0.01 x 4 = 0.04; 0.03 x 3 = 0.09; 0.04 x 2 = 0.08 -> max(0.09, 0.08) = 0.09;
    # 0.2 x 1 = 0.2
    got = holm_adjusted(p)
    assert got[4] != got[4]
    assert [got[i] for i in (0, 1, 2, 3, 5)] == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.2], abs=1e-15)
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = list(rng.uniform(0, 0.1, size=int(rng.integers(1, 12))))
        assert [a <= 0.05 for a in holm_adjusted(p)] == holm(p)


def test_mcnemar_and_the_interval_on_a_constructed_0_1_example():
    """20 questions: 6 right -> wrong, 1 wrong -> right, 13 unchanged. McNemar's exact p = 2 P(X <= 1), X ~
    Bin(7, 1/2) = 2 * 8 / 128 = 0.125; the mean change -5/20 = -0.25 with the paired t interval by hand."""
    before = np.array([1] * 6 + [0] + [1] * 8 + [0] * 5, float)
    after = np.array([0] * 6 + [1] + [1] * 8 + [0] * 5, float)
    assert mcnemar(before, after) == pytest.approx(0.125, abs=1e-15)
    assert mcnemar(before, before) == 1.0 and mcnemar(before, after + 0.5) is None
    got = contrast(Statistic(), ["t"] * 20, [before, after], [-1, 1])
    d = after - before  # six -1, one +1, thirteen 0
    var = (6 * (-1 + 0.25) ** 2 + (1 + 0.25) ** 2 + 13 * 0.25 ** 2) / 19
    assert got.delta == pytest.approx(-0.25, abs=1e-15) and got.stderr == pytest.approx(math.sqrt(var / 20), rel=1e-12)
    assert d.mean() == pytest.approx(got.delta, abs=1e-15)


def scored(before, after, label="1"):
    """A one-task sweep's records and its prune.csv row (acc), for add_intervals."""
    rows = [{"removed": "unpruned", "task": "t", "doc_id": i, "acc": float(v)} for i, v in enumerate(before)]
    rows += [{"removed": label, "task": "t", "doc_id": i, "acc": float(v)} for i, v in enumerate(after)]
    table = pd.DataFrame([{"layer": 1, "block": 1, "removed": label, "metric": "acc", "baseline": np.mean(before),
                           "pruned": np.mean(after), "delta": np.mean(after) - np.mean(before)}])
    return records_module.add_intervals(table, rows, "t").iloc[0]


def unpaired_margin(before) -> float:
    """The old rule: twice the baseline's binomial standard error."""
    p = np.mean(before)
    return 2 * math.sqrt(p * (1 - p) / (len(before) - 1))


def test_paired_interval_separates_where_the_unpaired_margin_says_noise():
    """400 questions, 60% right; removing the layer breaks 14 of them and fixes none: dP = -0.035 is inside the
    unpaired margin (0.049), yet every changed question went the same way: McNemar p = 2^-13."""
    before = np.array([1] * 240 + [0] * 160, float)
    after = before.copy()
    after[:14] = 0
    row = scored(before, after)
    assert abs(row["delta"]) < unpaired_margin(before)
    assert row["p_value"] == pytest.approx(2 * 0.5 ** 14) and row["delta_hi"] < 0 and row["significant"]


def test_the_unpaired_margin_separates_where_the_paired_interval_does_not():
    """100 questions, 50 right; removing the layer breaks 30 and fixes 18: dP = -0.12 is beyond the unpaired
    margin (0.1005), but the changes run both ways: McNemar p = 2 P(X <= 18), X ~ Bin(48, 1/2) = 0.11, and the paired
    interval covers 0."""
    before = np.array([1] * 50 + [0] * 50, float)
    after = before.copy()
    after[:30] = 0
    after[50:68] = 1
    row = scored(before, after)
    assert row["delta"] == pytest.approx(-0.12) and abs(row["delta"]) > unpaired_margin(before)
    assert row["p_value"] == pytest.approx(2 * stats.binom.cdf(18, 48, 0.5))
    assert row["delta_lo"] < 0 < row["delta_hi"] and not row["significant"]


def test_keep_by_bound_judges_the_worse_end_of_the_interval():
    """--keep 0.9 of an accuracy of 0.6 allows 0.54: a point at 0.56 is within; its interval reaching 0.52 is not,
    under --keep-by bound (the default); without an interval a bound is not judged at all (issue 47, item 5): never
    within, where the point would pass."""
    from layerprobe.commands.prune.curve import curve_table

    rows = [{"removed": "3", "metric": "acc", "baseline": 0.6, "pruned": 0.56, "delta": -0.04, "delta_lo": -0.08,
             "delta_hi": 0.0, "delta_stderr": 0.02, "p_value": 0.06, "significant": False},
            {"removed": "2-3", "metric": "acc", "baseline": 0.6, "pruned": 0.55, "delta": -0.05,
             "delta_lo": float("nan"), "delta_hi": float("nan")}]
    sets = {"last": {1: [3], 2: [2, 3]}}
    point = curve_table(sets, rows, "acc", True, 0.9, 4, keep_by="point")
    bound = curve_table(sets, rows, "acc", True, 0.9, 4)
    assert point["within"].tolist() == [True, True] and bound["within"].tolist() == [False, False]
    assert bound["delta_lo"].iloc[0] == -0.08 and not bound["significant"].iloc[0]


def test_a_group_metric_reads_its_subtasks_records_with_lm_evals_weighting():
    """MMLU-like: acc of group g over subtasks a (4 questions) and b (6): lm-eval's weight_by_size mean is the mean
    over all 10; a group averaging its subtasks alike gives another score, and the records find which one the
    table holds; acc/a reads a's documents alone."""
    before = {"a": [1, 1, 0, 0], "b": [1, 1, 1, 0, 0, 0]}
    after = {"a": [0, 0, 0, 0], "b": [1, 1, 1, 1, 0, 0]}
    rows = [{"removed": name, "task": t, "doc_id": i, "acc": float(v)}
            for name, scores in (("unpruned", before), ("1", after)) for t in "ab" for i, v in enumerate(scores[t])]
    by_size = (np.mean(before["a"] + before["b"]), np.mean(after["a"] + after["b"]))
    alike = (np.mean([np.mean(before[t]) for t in "ab"]), np.mean([np.mean(after[t]) for t in "ab"]))
    only_a = (np.mean(before["a"]), np.mean(after["a"]))
    table = pd.DataFrame([{"layer": 1, "block": 1, "removed": "1", "metric": m, "baseline": b, "pruned": p,
                           "delta": p - b} for m, (b, p) in (("acc", by_size), ("acc/a", only_a))])
    got = records_module.add_intervals(table, rows, "g", {"g": ["a", "b"]})
    d = {t: np.array(after[t], float) - np.array(before[t], float) for t in "ab"}
    var = sum((len(d[t]) / 10) ** 2 * d[t].var(ddof=1) / len(d[t]) for t in "ab")
    assert got["delta_stderr"].iloc[0] == pytest.approx(math.sqrt(var), rel=1e-12)
    assert got["delta_stderr"].iloc[1] == pytest.approx(d["a"].std(ddof=1) / 2, rel=1e-12)
    macro = table.iloc[:1].assign(baseline=alike[0], pruned=alike[1], delta=alike[1] - alike[0])
    alike_var = sum(0.25 * d[t].var(ddof=1) / len(d[t]) for t in "ab")
    got = records_module.add_intervals(macro, rows, "g", {"g": ["a", "b"]})
    assert got["delta_stderr"].iloc[0] == pytest.approx(math.sqrt(alike_var), rel=1e-12)
    wrong = table.iloc[:1].assign(pruned=0.9)  # records that do not give the table's score: no interval
    assert records_module.add_intervals(wrong, rows, "g", {"g": ["a", "b"]})["delta_stderr"].isna().all()


def test_prune_png_draws_each_known_interval():
    from matplotlib.container import ErrorbarContainer

    from layerprobe.plots.bars import prune_bars

    delta = np.array([-0.3, -0.01, 0.02])
    fig = prune_bars(["0", "1", "2"], delta, "acc", "t", interval=(np.array([-0.4, -0.05, np.nan]),
                                                                    np.array([-0.2, 0.03, np.nan])))
    bars = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    segments = bars[0].lines[2][0].get_segments()  # one vertical segment per known interval, at its ends
    ends = [float(v) for s in segments for v in (s[0][0], s[0][1], s[1][1])]
    assert ends == pytest.approx([0, -0.4, -0.2, 1, -0.05, 0.03])
