"""Issue 48: every "can go", "best" and "trust" sentence is a test, checked against independent references (scipy,
hand computations, a naive bootstrap loop), and each sentence changes when its test does (a point inside and a bound
outside the tolerance; two strategies inside each other's noise; a chance-level baseline; two signals that agree)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layerprobe.commands.prune.decide import curve_decisions, prune_decisions, signal_test
from layerprobe.commands.prune.read import prune_findings
from layerprobe.commands.prune.read_curve import curve_findings
from layerprobe.evaluation.records import add_intervals
from layerprobe.metrics.decisions import (chance_test, detectable, documents_needed, newcombe_paired,
                                          spearman_difference, wilson)
from layerprobe.runs.read import Run


# ---- the statistics against independent references -------------------------------------------------------------

@pytest.mark.parametrize("stderr,family", [(0.0198, 30), (0.05, 1), (0.3, 4)])
def test_the_minimum_detectable_effect_has_80_percent_power_at_the_corrected_level(stderr, family):
    """The power of a two-sided z test at 0.05 / family, computed from scipy's normal cdf at the stated effect, is
    0.8 (both tails counted)."""
    mde = detectable(stderr, family)
    z = stats.norm.isf(0.05 / family / 2)
    power = stats.norm.sf(z - mde / stderr) + stats.norm.cdf(-z - mde / stderr)
    assert power == pytest.approx(0.8, abs=1e-4)


def test_the_570_question_mmlu_run_cannot_see_an_acc_change_under_0_079():
    """The issue's number: median paired stderr 0.0198 over 30 removals."""
    assert detectable(0.0198, 30) == pytest.approx(0.0788, abs=5e-4)


def test_non_inferiority_bound_decides_as_scipys_one_sided_t_test_and_the_needed_documents_pass():
    """A curve point of a continuous per-document score (f1): its bound passes exactly when scipy's one-sided t test
    of the paired differences against -margin rejects at 2.5%; with the documents documents_needed asks for (the
    same change and spread), the bound lands on the margin."""
    rng = np.random.default_rng(3)
    n, margin = 60, 0.05
    before = rng.uniform(0.4, 0.9, n)
    for shift in (-0.01, -0.03, -0.045):
        after = np.clip(before + shift + rng.normal(0, 0.06, n), 0, 1)
        d = after - before
        records = ([{"removed": "unpruned", "task": "t", "doc_id": i, "f1": before[i]} for i in range(n)]
                   + [{"removed": "3", "task": "t", "doc_id": i, "f1": after[i]} for i in range(n)])
        table = pd.DataFrame([{"removed": "3", "layer": 3, "metric": "f1", "baseline": before.mean(),
                               "pruned": after.mean(), "delta": d.mean()}])
        row = add_intervals(table, records, "t").iloc[0]
        bound_passes = row["baseline"] + row["delta_lo"] >= row["baseline"] - margin
        p = stats.ttest_1samp(d + margin, 0.0, alternative="greater").pvalue
        assert bound_passes == (p < 0.025)
        needed = documents_needed(d.mean(), row["delta_stderr"], n, margin)
        if needed is not None:
            t = stats.t.ppf(0.975, n - 1)  # the needed count is on the normal scale; at n - 1 df it is a bit over
            se = row["delta_stderr"] * math.sqrt(n / needed)
            assert d.mean() - stats.norm.ppf(0.975) * se >= -margin - 1e-12
            assert d.mean() - stats.norm.ppf(0.975) * row["delta_stderr"] * math.sqrt(n / (needed - 1)) < -margin \
                or needed == n
            assert t > 0


def _two_sided_binomial(k: int, n: int, p: float) -> float:
    """By hand: the probability of every count no more likely than k (the 'minlike' two-sided p)."""
    pmf = [math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n + 1)]
    return min(1.0, sum(q for q in pmf if q <= pmf[k] * (1 + 1e-7)))


@pytest.mark.parametrize("k,n,chance", [(32, 100, 0.25), (153, 570, 0.25), (48, 100, 0.25), (3, 10, 0.5)])
def test_the_chance_test_is_the_exact_binomial_by_hand(k, n, chance):
    assert chance_test(k, n, chance).p == pytest.approx(_two_sided_binomial(k, n, chance), rel=1e-9)


def _wilson_roots(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's limits by hand: the two roots pi of (k/n - pi)^2 = z^2 pi (1 - pi) / n."""
    p = k / n
    roots = np.roots([1 + z * z / n, -(2 * p + z * z / n), p * p])
    return float(min(roots.real)), float(max(roots.real))


def test_wilson_and_newcombes_paired_interval_by_hand():
    """Wilson 0/10: 0 to 0.2775 (the published value); Newcombe's method 10 on his paired example (36 both right,
    12 right only after, 2 right only before): Wilson's limits from the quadratic's roots, phi from the 2 x 2."""
    lo, hi = wilson(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    z = stats.norm.ppf(0.975)
    after = [1] * 36 + [1] * 12 + [0] * 2
    before = [1] * 36 + [0] * 12 + [1] * 2
    (l1, u1), (l2, u2) = _wilson_roots(48, 50, z), _wilson_roots(38, 50, z)
    p1, p2 = 48 / 50, 38 / 50
    phi = (36 * 0 - 12 * 2) / math.sqrt(48 * 2 * 38 * 12)
    expect_lo = (p1 - p2) - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    expect_hi = (p1 - p2) + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    lo, hi = newcombe_paired(before, after)
    # the upper end is held to the range: a proportion at 0.76 before can rise by 0.24 at most
    assert (lo, hi) == (pytest.approx(expect_lo, abs=1e-12), pytest.approx(min(expect_hi, 1 - p2), abs=1e-12))
    assert expect_hi > 1 - p2 and 0.05 < lo < 0.2


def test_no_zero_width_interval_for_an_accuracy_at_1_or_with_nothing_changed():
    """Ten documents all right before and after: the plain paired stderr is 0; the interval has a width."""
    records = ([{"removed": "unpruned", "task": "t", "doc_id": i, "acc": 1.0} for i in range(10)]
               + [{"removed": "2", "task": "t", "doc_id": i, "acc": 1.0} for i in range(10)])
    table = pd.DataFrame([{"removed": "2", "layer": 2, "metric": "acc", "baseline": 1.0, "pruned": 1.0, "delta": 0.0}])
    row = add_intervals(table, records, "t").iloc[0]
    assert row["delta_lo"] == pytest.approx(wilson(10, 10)[0] - 1, abs=1e-12)  # Newcombe: the Wilson reach of 10 of 10
    assert row["delta_hi"] == 0 and not row["significant"]  # an accuracy of 1 cannot rise


def test_a_kl_interval_never_crosses_zero():
    """kl of the unpruned model is 0 on every sequence; a skewed pruned kl's interval stays above 0 (log scale)."""
    tokens = [10] * 12
    totals = [0.01] * 11 + [30.0]
    records = ([{"removed": "unpruned", "task": "kl", "doc_id": i, "tokens": t, "total": 0.0}
                for i, t in enumerate(tokens)]
               + [{"removed": "5", "task": "kl", "doc_id": i, "tokens": t, "total": v}
                  for i, (t, v) in enumerate(zip(tokens, totals))])
    kl = sum(totals) / sum(tokens)
    table = pd.DataFrame([{"removed": "5", "layer": 5, "metric": "kl", "baseline": 0.0, "pruned": kl, "delta": kl}])
    row = add_intervals(table, records, "kl").iloc[0]
    assert 0 < row["delta_lo"] < kl < row["delta_hi"]


def test_the_spearman_difference_is_the_hand_loop_over_resampled_layers():
    """The same generator's draws, each resample's two rhos by scipy, the percentile interval by hand."""
    rng = np.random.default_rng(7)
    cost = rng.normal(size=20)
    a = cost + rng.normal(0, 0.5, 20)
    b = cost + rng.normal(0, 1.5, 20)
    found = spearman_difference(a, b, cost, resamples=100, seed=11)  # 100 resamples: the same seed-for-seed check
    rows = np.random.default_rng(11).integers(0, 20, size=(100, 20))
    draws = []
    for r in rows:
        x, y = stats.spearmanr(a[r], cost[r])[0], stats.spearmanr(b[r], cost[r])[0]
        if np.isfinite(x) and np.isfinite(y):
            draws.append(x - y)
    draws = sorted(draws)
    assert found.difference == pytest.approx(stats.spearmanr(a, cost)[0] - stats.spearmanr(b, cost)[0], abs=1e-12)
    assert found.lo == pytest.approx(np.quantile(draws, 0.025), abs=1e-12)
    assert found.hi == pytest.approx(np.quantile(draws, 0.975), abs=1e-12)


def test_the_family_is_the_main_metric_and_per_subtask_rows_are_exploratory_unless_all():
    """A subtask row with a tiny p is flagged only with --family all; the family column gives the size."""
    n = 40
    records = [{"removed": "unpruned", "task": task, "doc_id": i, "acc": 1.0} for task in ("a", "b") for i in range(n)]
    records += [{"removed": "1", "task": "a", "doc_id": i, "acc": 0.0 if i < 30 else 1.0} for i in range(n)]
    records += [{"removed": "1", "task": "b", "doc_id": i, "acc": 1.0} for i in range(n)]
    rows = [{"removed": "1", "layer": 1, "metric": "acc", "baseline": 1.0, "pruned": 50 / 80, "delta": -30 / 80},
            {"removed": "1", "layer": 1, "metric": "acc/a", "baseline": 1.0, "pruned": 10 / 40, "delta": -30 / 40}]
    table = pd.DataFrame(rows)
    main = add_intervals(table, records, "g", {"g": ["a", "b"]}, "acc")
    every = add_intervals(table, records, "g", {"g": ["a", "b"]}, "acc", "all")
    assert main["significant"].tolist() == [True, False] and main["family"].tolist() == [1, 0]
    assert every["significant"].tolist() == [True, True] and every["family"].tolist() == [2, 2]


# ---- each sentence changes when its test does ---------------------------------------------------------------------

def _curve(points: dict, n: int, keep_by: str = "bound", keep: float = 0.9) -> Run:
    """A curve run from per-document 0/1 scores: points {(strategy, k): (label, [acc per document])}, the unpruned
    model's under ('', ...)."""
    from layerprobe.commands.prune.curve import curve_table
    from layerprobe.removal import parse_remove

    base = points.pop(("", 0))[1]
    records = [{"removed": "unpruned", "task": "arc_easy", "doc_id": i, "acc": float(v)} for i, v in enumerate(base)]
    labels = {}
    for label, values in points.values():
        labels[label] = values
    for label, values in labels.items():
        records += [{"removed": label, "task": "arc_easy", "doc_id": i, "acc": float(v)} for i, v in enumerate(values)]
    scores = pd.DataFrame([{"removed": label, "layer": 0, "metric": "acc", "baseline": float(np.mean(base)),
                            "pruned": float(np.mean(v)), "delta": float(np.mean(v) - np.mean(base))}
                           for label, v in labels.items()])
    scores = add_intervals(scores, records, "arc_easy", None, "acc")
    sets = {}
    for (strategy, k), (label, _) in points.items():
        sets.setdefault(strategy, {})[k] = parse_remove(label, 8)
    table = curve_table(sets, scores.to_dict("records"), "acc", True, keep, 8, keep_by=keep_by)
    s = {"metric": "acc", "higher_is_better": True, "keep": keep, "baseline": float(np.mean(base)), "num_layers": 8,
         "keep_by": keep_by, "records": "samples.csv.gz", "task": "arc_easy",
         **curve_decisions(table, records, "arc_easy", "acc", True, keep, keep_by, scores)}
    return Run(Path("."), "curve", s, {}, {"curve": table, "scores": scores})


def _flip(values: list, count: int, to: float) -> list:
    out, done = list(values), 0
    for i, v in enumerate(out):
        if done < count and v != to:
            out[i], done = to, done + 1
    return out


def test_a_point_inside_and_a_bound_outside_the_tolerance_cannot_go_unless_exploratory():
    """0.6 of 200 right; keep 0.9 allows 0.54. Removing layer 7 loses 8 questions (0.56): inside by its point, its
    interval's worse end below 0.54. Under bound no layer can go (and the documents needed are said); under point it
    can, labelled exploratory."""
    base = [1] * 120 + [0] * 80
    points = lambda: {("", 0): ("", base), ("last", 1): ("7", _flip(base, 8, 0))}
    bound = " ".join(curve_findings(_curve(points(), 200)))
    point = " ".join(curve_findings(_curve(points(), 200, keep_by="point")))
    assert "last: no layer can go" in bound and "non-inferiority, one-sided 97.5%" in bound
    assert "k = 1 is within by its point, and its bound would need about" in bound
    assert "last: exploratory, by point estimate: 1 of 8 layers" in point
    firm = " ".join(curve_findings(_curve({("", 0): ("", base), ("last", 1): ("7", base)}, 200)))
    assert "last: 1 of 8 layers (12%) can go" in firm  # nothing changed: the bound passes


def test_two_strategies_inside_each_others_noise_are_not_called_best():
    base = [1] * 60 + [0] * 40
    near = {("", 0): ("", base), ("last", 1): ("7", _flip(base, 3, 0)), ("bi", 1): ("3", _flip(base, 1, 0))}
    text = " ".join(curve_findings(_curve(near, 100, keep=0.5)))
    assert "No strategy is measurably better than all the others" in text and "Best strategy" not in text
    assert "inside each other's noise" in text and "McNemar" in text
    apart = {("", 0): ("", base), ("last", 1): ("7", _flip(base, 40, 0)), ("bi", 1): ("3", base)}
    text = " ".join(curve_findings(_curve(apart, 100, keep=0.3)))
    assert "Best strategy here: bi" in text and "better at k = 1" in text


def _prune_run(acc_base: list, acc_pruned: dict, signals: dict | None = None) -> Run:
    records = [{"removed": "unpruned", "task": "arc_easy", "doc_id": i, "acc": float(v)} for i, v in enumerate(acc_base)]
    rows = []
    for layer, values in acc_pruned.items():
        records += [{"removed": str(layer), "task": "arc_easy", "doc_id": i, "acc": float(v)}
                    for i, v in enumerate(values)]
        rows.append({"removed": str(layer), "layer": layer, "block": 1, "metric": "acc",
                     "baseline": float(np.mean(acc_base)), "pruned": float(np.mean(values)),
                     "delta": float(np.mean(values) - np.mean(acc_base))})
    table = add_intervals(pd.DataFrame(rows), records, "arc_easy", None, "acc")
    s = {"model": "m", "task": "arc_easy", "metric": "acc", "higher_is_better": True, "block": 1,
         "baseline": float(np.mean(acc_base)), "records": "samples.csv.gz",
         **prune_decisions(table, records, "arc_easy", "acc")}
    run = Run(Path("."), "prune", s, {}, {"prune": table})
    return _with_signals(run, signals) if signals else run


def _with_signals(run: Run, signals: dict) -> Run:
    """The run with its cheap signals' Spearman correlations with the cost and their signal_test (its table and
    decisions as they were: one records table serves several signal sets)."""
    table = run.tables["prune"]
    cost = -table["delta"].to_numpy()
    s = {**run.summary, "spearman_delta": {k: -stats.spearmanr(v, cost)[0] for k, v in signals.items()},
         "signal_test": signal_test(signals, cost)}
    return Run(Path("."), "prune", s, {}, {"prune": table})


def test_a_chance_level_baseline_is_said_to_be_one():
    good = [1] * 60 + [0] * 40
    at_chance = [1] * 27 + [0] * 73  # 0.27 of 100, chance 0.25: p 0.64
    text = " ".join(prune_findings(_prune_run(good, {0: good, 1: at_chance})))
    assert "is above chance 0.25" in text and "Without 1 (p 0.64), acc cannot be told from chance" in text
    assert "Without 0" not in text
    text = " ".join(prune_findings(_prune_run(at_chance, {0: at_chance, 1: at_chance})))
    assert "The unpruned acc 0.27 (27 of 100) cannot be told from chance 0.25" in text
    assert "minimum detectable effect" in text


def test_the_signal_to_trust_is_named_only_where_the_bootstrap_separates_it():
    rng = np.random.default_rng(1)
    base = [1] * 200 + [0] * 100
    losses = list(range(0, 60, 2))  # 30 layers, each losing more questions
    pruned = {layer: _flip(base, lost, 0) for layer, lost in enumerate(losses)}
    cost = np.array(losses, dtype=float)
    run = _prune_run(base, pruned)  # the same removals under both signal sets
    close = {"angular": cost + rng.normal(0, 3, 30), "block_influence": cost + rng.normal(0, 3, 30)}
    text = " ".join(prune_findings(_with_signals(run, close)))
    assert "the signals agree" in text and "the one to trust" not in text
    apart = {"angular": cost + rng.normal(0, 1, 30), "block_influence": rng.normal(0, 1, 30) + 0.3 * cost}
    text = " ".join(prune_findings(_with_signals(run, apart)))
    assert "the one to trust for this model is d(l, 1)" in text and "bootstrap over the 30 layers" in text


def test_too_few_documents_ranks_without_verdicts():
    base = [1, 0, 1, 1, 0, 1]
    pruned = {0: [0, 0, 0, 0, 0, 0], 1: [1, 0, 1, 1, 0, 1], 2: [1, 0, 1, 0, 0, 1]}
    text = " ".join(prune_findings(_prune_run(base, pruned)))
    assert "Too few documents to test (6, fewer than 10)" in text and "Cheapest to remove, by point estimate" in text
    assert "measurably" not in text


def test_clustered_change_is_statsmodels_cluster_robust_ols_with_g_minus_1_df():
    """mean(after - before) with subject-clustered errors: statsmodels' OLS on a constant, cov_type 'cluster' (CR1,
    G / (G - 1) with one regressor), t with G - 1 df."""
    from statsmodels.regression import linear_model as sm  # OLS, WLS: statsmodels.api less its other imports
    from layerprobe.metrics.decisions import clustered_mean_change

    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(12), rng.integers(3, 9, 12))
    shared = rng.normal(0, 0.5, 12)[clusters]  # each subject's questions move together
    before = rng.normal(-1, 1, len(clusters))
    after = before - 0.2 + shared + rng.normal(0, 0.3, len(clusters))
    change, stderr, lo, hi, p = clustered_mean_change(before, after, clusters)
    fit = sm.OLS(after - before, np.ones(len(clusters))).fit(cov_type="cluster", cov_kwds={"groups": clusters},
                                                              use_t=True)
    assert change == pytest.approx(fit.params[0], abs=1e-12)
    assert stderr == pytest.approx(fit.bse[0], rel=1e-10)
    assert (lo, hi) == (pytest.approx(fit.conf_int()[0][0], rel=1e-10), pytest.approx(fit.conf_int()[0][1], rel=1e-10))
    assert p == pytest.approx(fit.pvalues[0], rel=1e-8) and fit.df_resid_inference == 11


def test_one_probe_sequence_judges_no_k_on_the_bound_and_says_so():
    """Issue 47, item 5: a curve scored on too few documents has no usable interval; bound judges nothing and the
    findings say why instead of claiming the worse end of an interval."""
    base = [1, 1, 0, 1, 0]
    run = _curve({("", 0): ("", base), ("last", 1): ("7", base)}, 5)
    assert run.summary["curve"]["last"]["max_k"] == 0 and not run.tables["curve"]["within"].any()
    text = " ".join(curve_findings(run))
    assert "Too few documents to test (5, fewer than 10): no k is judged at its bound" in text
    assert "Best strategy" not in text
    # no strategy's line rests on the interval there is not (the replay's "no layer can go ... even at the worse end")
    assert "worse end" not in text and "last: no k is judged (too few documents for its interval)" in text


def test_the_needed_documents_are_not_claimed_from_too_few_or_below_what_was_scored():
    from layerprobe.commands.prune.read_curve import _needed

    verdict = {"next_k": 1, "next_needed": 2}
    assert _needed(verdict, {"documents": 2, "min_documents": 10}) == ""  # too few to test: no count from 2
    assert _needed(verdict, {"documents": 40, "min_documents": 10}).endswith("would need more than the 40 scored")
    assert "about 900 documents (against 40 scored)" in _needed({"next_k": 3, "next_needed": 900},
                                                                {"documents": 40, "min_documents": 10})


@pytest.mark.parametrize("n", [4, 12])
def test_below_the_minimum_of_documents_no_change_is_flagged(n):
    """Every document right unpruned and wrong without layer 0: McNemar's exact p = 2 / 2^n (hand), 0.125 for 4 and
    0.00049 for 12; below MIN_DOCUMENTS (10) the records rank but Holm flags nothing (family 0)."""
    import pandas as pd

    from layerprobe.evaluation.records import add_intervals
    from layerprobe.metrics.decisions import MIN_DOCUMENTS

    records = [{"removed": removed, "task": "t", "doc_id": i, "gold": 0, "chosen": 0 if removed == "unpruned" else 1,
                "acc": 1.0 if removed == "unpruned" else 0.0,
                "gold_loglik": -1.0 if removed == "unpruned" else -2.0 - 0.01 * i}
               for removed in ("unpruned", "0") for i in range(n)]
    table = pd.DataFrame([{"layer": 0, "block": 1, "removed": "0", "metric": "acc", "baseline": 1.0, "pruned": 0.0,
                           "delta": -1.0, "baseline_stderr": 0.0, "pruned_stderr": 0.0}])
    row = add_intervals(table, records, "t").iloc[0]
    assert row["p_value"] == pytest.approx(2 / 2 ** n, rel=1e-9)
    if n < MIN_DOCUMENTS:
        assert not row["significant"] and not row["loglik_significant"] and row["family"] == 0
    else:
        assert row["significant"] and row["loglik_significant"] and row["family"] == 1


def test_weighted_clustered_change_is_statsmodels_cluster_robust_wls():
    """Each subtask weighted alike (a mean of subtask means): statsmodels' WLS on a constant with weights
    w_s / n_s, cov_type 'cluster', t with G - 1 df."""
    from statsmodels.regression import linear_model as sm  # OLS, WLS: statsmodels.api less its other imports
    from layerprobe.metrics.decisions import clustered_mean_change

    rng = np.random.default_rng(8)
    clusters = np.repeat(np.arange(11), rng.integers(2, 10, 11))
    before, after = rng.normal(0, 1, len(clusters)), rng.normal(-0.3, 1, len(clusters))
    weights = 1 / np.bincount(clusters)[clusters]
    change, stderr, lo, hi, p = clustered_mean_change(before, after, clusters, weights)
    fit = sm.WLS(after - before, np.ones(len(clusters)), weights=weights).fit(
        cov_type="cluster", cov_kwds={"groups": clusters}, use_t=True)
    assert change == pytest.approx(fit.params[0], abs=1e-12) and stderr == pytest.approx(fit.bse[0], rel=1e-10)
    assert (lo, hi) == (pytest.approx(fit.conf_int()[0][0], rel=1e-10), pytest.approx(fit.conf_int()[0][1], rel=1e-10))
    assert p == pytest.approx(fit.pvalues[0], rel=1e-8)


def _grouped(subtasks: int, seed: int = 2):
    """Records of a group (`subtasks` subtasks of 5-9 questions, three choices each: acc, gold_loglik and every
    choice's loglikelihood) and its prune.csv rows for removals 1-3, a shared shift per subtask."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 10, subtasks)
    names = [f"s{k:02d}" for k in range(subtasks) for _ in range(sizes[k])]
    base = rng.normal(-2, 1, (len(names), 3))
    variants = {"unpruned": base}
    for layer, shift in ((1, -0.6), (2, -0.05), (3, -0.3)):
        by_task = rng.normal(0, 0.4, subtasks)[[int(n[1:]) for n in names]]
        variants[str(layer)] = base + shift * np.array([1.6, 1.0, 1.0]) + by_task[:, None] * np.array([1, 0, 0]) \
            + rng.normal(0, 0.3, base.shape)
    records = []
    for removed, lls in variants.items():
        for i, (task, row) in enumerate(zip(names, lls)):
            records.append({"removed": removed, "task": task, "doc_id": i, "gold": 0,
                            "chosen": int(np.argmax(row)), "gold_loglik": float(row[0]),
                            "acc": float(np.argmax(row) == 0),
                            **{f"choice_loglik_{c}": float(row[c]) for c in range(3)}})
    acc = {k: float(np.mean(np.argmax(v, axis=1) == 0)) for k, v in variants.items()}
    rows = pd.DataFrame([{"removed": k, "layer": int(k), "block": 1, "metric": "acc", "baseline": acc["unpruned"],
                          "pruned": acc[k], "delta": acc[k] - acc["unpruned"]} for k in ("1", "2", "3")])
    groups = {"g": sorted(set(names))}
    return records, rows, groups, np.array(names), variants


def test_cluster_subtask_gives_statsmodels_intervals_and_holm_flags_in_prune_csv():
    """--cluster subtask on a group of 12 subtasks: each row's dP, gold loglikelihood and margin intervals are
    statsmodels' cluster-robust OLS of the per-document differences (G - 1 df), the flags Holm by hand over those
    p-values; --cluster none keeps the stratified ones (McNemar's p); 4 subtasks stay stratified, said so."""
    from statsmodels.regression import linear_model as sm  # OLS, WLS: statsmodels.api less its other imports
    from layerprobe.evaluation.records import interval_estimand

    records, rows, groups, names, variants = _grouped(12)
    table = add_intervals(rows, records, "g", groups, "acc", cluster="subtask")
    base = variants["unpruned"]
    margin = lambda v: v[:, 0] - v[:, 1:].max(axis=1)
    correct = lambda v: (np.argmax(v, 1) == 0).astype(float)
    p = {}
    for row in table.itertuples():
        v = variants[row.removed]
        for prefix, d in (("delta", correct(v) - correct(base)),
                          ("loglik", v[:, 0] - base[:, 0]), ("margin", margin(v) - margin(base))):
            fit = sm.OLS(d.astype(float), np.ones(len(d))).fit(cov_type="cluster", cov_kwds={"groups": names},
                                                                use_t=True)
            lo, hi = fit.conf_int()[0]
            got = getattr(row, "delta" if prefix == "delta" else f"{prefix}_delta")
            assert got == pytest.approx(fit.params[0], abs=1e-12)
            assert (getattr(row, f"{prefix}_lo"), getattr(row, f"{prefix}_hi")) == (pytest.approx(lo, rel=1e-9),
                                                                                   pytest.approx(hi, rel=1e-9))
            p[(prefix, row.removed)] = fit.pvalues[0]
        assert row.p_value == pytest.approx(p[("delta", row.removed)], rel=1e-8)
        assert row.delta_stderr == pytest.approx(sm.OLS(correct(v) - correct(base), np.ones(len(v))).fit(
            cov_type="cluster", cov_kwds={"groups": names}).bse[0], rel=1e-10)
    for prefix, flag in (("delta", "significant"), ("loglik", "loglik_significant"), ("margin", "margin_significant")):
        ordered = sorted(table.itertuples(), key=lambda r: p[(prefix, r.removed)])
        still = True
        for rank, row in enumerate(ordered):  # Holm by hand over the three removals
            still = still and p[(prefix, row.removed)] <= 0.05 / (3 - rank)
            lo, hi = getattr(row, f"{prefix}_lo"), getattr(row, f"{prefix}_hi")
            assert getattr(row, flag) == (still and (lo > 0 or hi < 0)), (prefix, row.removed)
    assert table["margin_significant"].any() and not table["margin_significant"].all()
    assert interval_estimand(records, "acc", "g", groups, "subtask")["name"] == "clustered"
    none = add_intervals(rows, records, "g", groups, "acc", cluster="none")
    assert (none["delta_stderr"] != table["delta_stderr"]).all()
    assert interval_estimand(records, "acc", "g", groups, "none")["name"] == "stratified"
    few, rows4, groups4, _, _ = _grouped(4)
    pd.testing.assert_frame_equal(add_intervals(rows4, few, "g", groups4, "acc", cluster="subtask"),
                                  add_intervals(rows4, few, "g", groups4, "acc", cluster="none"))
    said = interval_estimand(few, "acc", "g", groups4, "subtask")
    assert said["name"] == "stratified" and "needs at least 10 subtasks" in said["words"]


def test_the_findings_name_the_estimand_in_words():
    records, rows, groups, _, _ = _grouped(12)
    tables = {cluster: add_intervals(rows, records, "g", groups, "acc", cluster=cluster)
              for cluster in ("subtask", "none")}
    none = tables["none"]  # --cluster none's flags: the comparison beside, for both
    for cluster, words in (("subtask", "cluster-robust by subtask (CR1, Student's t with 11 df over the 12 "
                                       "subtasks, --cluster subtask"),
                           ("none", "treat the 12 subtasks as fixed strata")):
        table = tables[cluster]
        s = {"model": "m", "task": "g", "metric": "acc", "higher_is_better": True, "block": 1,
             "baseline": float(table["baseline"].iloc[0]), "records": "samples.csv.gz",
             **prune_decisions(table, records, "g", "acc", "main", cluster, groups)}
        assert s["interval_estimand"]["name"] == ("clustered" if cluster == "subtask" else "stratified")
        text = " ".join(prune_findings(Run(Path("."), "prune", s, {}, {"prune": table})))
        assert words in text, text
        clustered = s["clustered"]["acc"]
        # the comparison beside: the stratified verdicts are --cluster none's flags whichever prune.csv carries
        assert clustered["stratified_measurable"] == [str(r) for r in none.loc[none["significant"], "removed"]]


def test_the_margin_tells_less_sure_from_everything_less_likely():
    """Removal 1 shifts the gold choice down more than the others (margin drops), removal 3 every choice alike
    (margin unchanged): the findings say which is which."""
    rng = np.random.default_rng(4)
    n = 80
    base = rng.normal(-2, 0.5, (n, 3))
    base[:, 0] += 1.0
    variants = {"unpruned": base, "1": base + np.array([-1.0, 0, 0]) + rng.normal(0, 0.1, (n, 3)),
                "3": base - 1.0 + rng.normal(0, 0.1, (n, 1)) + rng.normal(0, 0.05, (n, 1)) * np.array([1, 0, 0])}
    records = [{"removed": k, "task": "t", "doc_id": i, "gold": 0, "gold_loglik": float(r[0]),
                "acc": float(np.argmax(r) == 0), **{f"choice_loglik_{c}": float(r[c]) for c in range(3)}}
               for k, v in variants.items() for i, r in enumerate(v)]
    acc = {k: float(np.mean(np.argmax(v, 1) == 0)) for k, v in variants.items()}
    rows = pd.DataFrame([{"removed": k, "layer": int(k), "block": 1, "metric": "acc", "baseline": acc["unpruned"],
                          "pruned": acc[k], "delta": acc[k] - acc["unpruned"]} for k in ("1", "3")])
    table = add_intervals(rows, records, "t", None, "acc")
    s = {"model": "m", "task": "t", "metric": "acc", "higher_is_better": True, "block": 1,
         "baseline": acc["unpruned"], "records": "samples.csv.gz", **prune_decisions(table, records, "t", "acc")}
    text = " ".join(prune_findings(Run(Path("."), "prune", s, {}, {"prune": table})))
    assert "Without 1 of those 2 the model got less sure of the right answer" in text and "1 (margin -0.996" in text
    assert "Without 1 of them the drop cannot be told from everything getting less likely" in text and "3 (margin" in text


def test_records_without_every_choice_do_not_call_a_gold_drop_less_sure():
    """Issue 48: records made before every choice was kept hold the gold answer's loglikelihood only; a measurable
    drop in it (here every choice down by 1 nat alike, so the model is no less sure) is said to be untested for the
    margin, never left to read as 'less sure of the right answer'."""
    rng = np.random.default_rng(5)
    n = 80
    base = rng.normal(-2, 0.5, (n, 3))
    base[:, 0] += 1.0
    variants = {"unpruned": base, "2": base - 1.0 + rng.normal(0, 0.1, (n, 1))}
    records = [{"removed": k, "task": "t", "doc_id": i, "gold": 0, "gold_loglik": float(r[0]),
                "acc": float(np.argmax(r) == 0)} for k, v in variants.items() for i, r in enumerate(v)]
    acc = {k: float(np.mean(np.argmax(v, 1) == 0)) for k, v in variants.items()}
    rows = pd.DataFrame([{"removed": "2", "layer": 2, "block": 1, "metric": "acc", "baseline": acc["unpruned"],
                          "pruned": acc["2"], "delta": acc["2"] - acc["unpruned"]}])
    table = add_intervals(rows, records, "t", None, "acc")
    assert table["loglik_hi"].iloc[0] < 0  # the gold loglikelihood drop is measurable (about -1, by construction)
    s = {"model": "m", "task": "t", "metric": "acc", "higher_is_better": True, "block": 1,
         "baseline": acc["unpruned"], "records": "samples.csv.gz", **prune_decisions(table, records, "t", "acc")}
    text = " ".join(prune_findings(Run(Path("."), "prune", s, {}, {"prune": table})))
    assert "drops measurably without 1 of 1" in text
    assert "cannot be told from every choice getting less likely alike" in text and "less sure of the right" in text
    assert "got less sure of the right answer: the margin" not in text


def test_a_zero_cluster_robust_stderr_gives_no_interval():
    """Issue 47, replay B08: two subtasks whose documents all moved by the same amount have a cluster-robust stderr
    of exactly 0 (every cluster's residual sum is 0, by hand), and the change was 'measurable' at p 0 from an
    interval of zero width. A zero stderr is no evidence of precision: no interval, no p."""
    from layerprobe.metrics.decisions import clustered_mean_change

    change, stderr, lo, hi, p = clustered_mean_change([0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5], ["a", "a", "b", "b"])
    assert change == 0.5 and stderr == 0.0
    assert math.isnan(lo) and math.isnan(hi) and math.isnan(p)
