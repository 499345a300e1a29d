"""Issue 48, the parts left after session 17: the margin's interval on acc_norm rows (loglikelihoods per character,
as lm-eval's acc_norm compares them), float rounding is not a change (every metric, one guard), and a curve's
best-strategy test takes the run's cluster-robust estimand. Hand-built records; references are hand loops, scipy
and statsmodels."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layerprobe.commands.prune.decide import curve_decisions, strategy_test
from layerprobe.evaluation.records import add_intervals, healed_intervals
from layerprobe.metrics.decisions import clustered_mean_change
from layerprobe.metrics.paired import Statistic, contrast


def _choice_records(variants: dict, chars: np.ndarray, task=None) -> list[dict]:
    """Records of three-choice documents, gold 0: acc, acc_norm (lm-eval's picks) and every choice's loglikelihood
    and length."""
    out = []
    for removed, lls in variants.items():
        for i, row in enumerate(lls):
            norm = row / chars[i]
            out.append({"removed": removed, "task": task[i] if task is not None else "t", "doc_id": i, "gold": 0,
                        "chosen": int(np.argmax(row)), "chosen_norm": int(np.argmax(norm)),
                        "gold_loglik": float(row[0]), "gold_loglik_norm": float(norm[0]),
                        "acc": float(np.argmax(row) == 0), "acc_norm": float(np.argmax(norm) == 0),
                        **{f"choice_loglik_{c}": float(row[c]) for c in range(3)},
                        **{f"choice_chars_{c}": int(chars[i, c]) for c in range(3)}})
    return out


def _rows(variants: dict, chars: np.ndarray, labels: tuple) -> pd.DataFrame:
    rows = []
    for metric, norm in (("acc", False), ("acc_norm", True)):
        score = {k: float(np.mean(np.argmax(v / chars if norm else v, axis=1) == 0)) for k, v in variants.items()}
        rows += [{"removed": k, "layer": int(k), "block": 1, "metric": metric, "baseline": score["unpruned"],
                  "pruned": score[k], "delta": score[k] - score["unpruned"]} for k in labels]
    return pd.DataFrame(rows)


def test_acc_norm_rows_carry_the_margin_of_the_loglikelihoods_per_character():
    """By hand: per document, gold / its length minus the best wrong choice / its length; the paired t interval of
    the mean change (scipy's t). acc rows keep the raw margin; records without choice lengths give no acc_norm
    margin (rather than a raw one under the acc_norm name)."""
    rng = np.random.default_rng(11)
    n = 60
    chars = rng.integers(3, 40, (n, 3)).astype(float)
    base = rng.normal(-20, 6, (n, 3))
    variants = {"unpruned": base, "4": base + rng.normal(0, 1.5, (n, 3)) + np.array([-1.0, 0, 0])}
    table = add_intervals(_rows(variants, chars, ("4",)), _choice_records(variants, chars), "t", None, "acc")
    for metric, scale in (("acc", np.ones_like(chars)), ("acc_norm", chars)):
        margin = lambda v: np.array([r[0] / s[0] - max(r[1] / s[1], r[2] / s[2]) for r, s in zip(v, scale)])
        d = margin(variants["4"]) - margin(base)
        half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
        row = table[table["metric"] == metric].iloc[0]
        assert row["margin_delta"] == pytest.approx(d.mean(), rel=1e-12)
        assert (row["margin_lo"], row["margin_hi"]) == (pytest.approx(d.mean() - half, rel=1e-10),
                                                        pytest.approx(d.mean() + half, rel=1e-10))
        assert row["margin_p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue, rel=1e-8)
    older = [{k: v for k, v in r.items() if not k.startswith("choice_chars_")}
             for r in _choice_records(variants, chars)]
    table = add_intervals(_rows(variants, chars, ("4",)), older, "t", None, "acc")
    assert table.set_index("metric")["margin_delta"].isna().tolist() == [False, True]


def test_every_choice_moved_alike_is_no_margin_change_not_a_measurable_one():
    """Every choice's loglikelihood shifted by the same amount (choices of one length within a document, so per
    character too): the margin is the same number up to float rounding (~1e-15 per document). That is a change of
    exactly 0, interval [0, 0], p 1, never flagged, on the stratified and the clustered path; a real change of
    1e-6 nats per document is still measured."""
    rng = np.random.default_rng(3)
    n, subtasks = 120, 12
    chars = np.repeat(rng.integers(3, 40, (n, 1)), 3, axis=1).astype(float)  # alike per document: acc_norm's too
    base = rng.normal(-20, 6, (n, 3))
    tasks = np.array([f"s{k:02d}" for k in np.arange(n) % subtasks])
    tiny = np.array([-1e-6, 0, 0]) * rng.uniform(0.5, 1.5, (n, 1))  # the gold choice only, a real 1e-6
    variants = {"unpruned": base, "1": base - 0.37, "2": base + tiny}
    margin = lambda v: v[:, 0] - v[:, 1:].max(axis=1)
    noise = margin(variants["1"]) - margin(base)
    assert np.abs(noise).max() > 0 and np.abs(noise).max() < 1e-13  # the artifact the guard is for
    groups = {"g": sorted(set(tasks))}
    for cluster in ("none", "subtask"):
        table = add_intervals(_rows(variants, chars, ("1", "2")), _choice_records(variants, chars, tasks), "g", groups,
                              "acc", "all", cluster).set_index(["metric", "removed"])
        for metric in ("acc", "acc_norm"):
            same = table.loc[(metric, "1")]
            assert (same["margin_delta"], same["margin_lo"], same["margin_hi"], same["margin_p_value"]) == (0, 0, 0, 1)
            assert not same["margin_significant"]
        real = table.loc[("acc", "2")]
        assert real["margin_delta"] < 0 and real["margin_hi"] < 0 and real["margin_significant"], cluster


def test_float_rounding_is_no_change_for_ratio_scores_too_and_a_real_change_stays():
    """The guard is in contrast() itself: a ppl-like exp-ratio and a kl-like ratio whose per-sequence totals differ
    by float rounding only give [0, 0] with p 1; the same totals changed by 1e-7 relative give an interval."""
    rng = np.random.default_rng(5)
    tokens = np.full(16, 256.0)
    totals = rng.uniform(700, 900, 16)
    jitter = totals * (1 + rng.choice([-1, 1], 16) * 2.0 ** -52)  # one unit in the last place
    strata = np.zeros(16)
    for kind in ("ratio", "exp_ratio"):
        same = contrast(Statistic(kind), strata, [totals, jitter], [-1.0, 1.0], [tokens, tokens])
        assert (same.delta, same.stderr, same.lo, same.hi, same.p) == (0, 0, 0, 0, 1)
        moved = totals * (1 + rng.normal(1e-7, 5e-8, 16))
        real = contrast(Statistic(kind), strata, [totals, moved], [-1.0, 1.0], [tokens, tokens])
        assert real.delta > 0 and real.stderr > 0 and real.lo < real.hi
    change = clustered_mean_change(totals, jitter, np.arange(16) % 4)
    assert change == (0.0, 0.0, 0.0, 0.0, 1.0)


def test_the_strategy_test_is_cluster_robust_where_the_runs_intervals_are():
    """A group of 12 subtasks, two strategies at k = 1, 2, 3 with subtask-level shifts: with the run's estimand
    clustered, each k's p-value is statsmodels' cluster-robust OLS of the per-document differences (CR1, t with
    G - 1 df) and the verdicts are statsmodels' Holm over those; unclustered, McNemar's exact test (scipy's
    binomial test on the discordant pairs), which differs."""
    from statsmodels.regression import linear_model as sm  # OLS, WLS: statsmodels.api less its other imports
    from unittest import mock

    from statsmodels.stats.multitest import multipletests

    def holm(p):  # statsmodels' Holm, less the gc.collect() it runs on every call (0.2 s or more in a big process)
        with mock.patch("gc.collect"):
            return multipletests(p, alpha=0.05, method="holm")

    rng = np.random.default_rng(7)
    names = np.repeat([f"s{k:02d}" for k in range(12)], 15)
    n = len(names)
    base = (rng.uniform(size=n) < 0.6).astype(float)
    lean = rng.normal(0, 0.25, 12)[np.repeat(np.arange(12), 15)]  # a subtask's questions move together

    def variant(loss):
        return np.where(rng.uniform(size=n) < np.clip(loss + lean, 0, 1), 0.0, base)

    picks = {("a", 1): "3", ("a", 2): "3,4", ("a", 3): "2-4", ("b", 1): "7", ("b", 2): "6-7", ("b", 3): "5-7"}
    scores = {"unpruned": base, "3": variant(0.02), "3,4": variant(0.05), "2-4": variant(0.08),
              "7": variant(0.2), "6-7": variant(0.35), "5-7": variant(0.5)}
    records = [{"removed": label, "task": names[i], "doc_id": i, "acc": float(v[i])}
               for label, v in scores.items() for i in range(n)]
    table = pd.DataFrame([{"strategy": s, "k": k, "removed": label, "score": scores[label].mean()}
                          for (s, k), label in picks.items()])
    clustered = strategy_test(table, records, "acc", True, "a", clustered=True)
    plain = strategy_test(table, records, "acc", True, "a", clustered=False)
    p, exact = [], []
    for k in (1, 2, 3):
        d = scores[picks[("a", k)]] - scores[picks[("b", k)]]
        fit = sm.OLS(d, np.ones(n)).fit(cov_type="cluster", cov_kwds={"groups": names}, use_t=True)
        assert fit.df_resid_inference == 11
        p.append(fit.pvalues[0])
        assert clustered_mean_change(scores[picks[("b", k)]], scores[picks[("a", k)]], names)[4] == \
            pytest.approx(fit.pvalues[0], rel=1e-8)
        gained, lost = int((d > 0).sum()), int((d < 0).sum())
        exact.append(stats.binomtest(gained, gained + lost, 0.5).pvalue)
    reject, adjusted, _, _ = holm(p)
    assert clustered["clustered"] and "cluster-robust by subtask" in clustered["test"]
    assert clustered["against"]["b"]["better_at"] == [k for k, r in zip((1, 2, 3), reject) if r]
    assert clustered["against"]["b"]["smallest_adjusted_p"] == pytest.approx(min(adjusted), rel=1e-8)
    _, adjusted_exact, _, _ = holm(exact)
    assert plain["against"]["b"]["smallest_adjusted_p"] == pytest.approx(min(adjusted_exact), rel=1e-8)
    assert not plain["clustered"] and "McNemar" in plain["test"]
    assert min(adjusted) != pytest.approx(min(adjusted_exact), rel=1e-3)
    # curve_decisions takes the run's estimand: clustered there, clustered here
    curve = table.assign(metric="acc", fraction=table["k"] / 8, baseline=base.mean(),
                         delta=table["score"] - base.mean(), within=True, family=0)
    decided = curve_decisions(curve, records, "g", "acc", True, 0.5, "point", estimand={"name": "clustered"})
    assert decided["strategy_test"]["clustered"] and decided["strategy_test"]["against"] == clustered["against"]
    assert not curve_decisions(curve, records, "g", "acc", True, 0.5, "point")["strategy_test"]["clustered"]
    # the first 9 questions only (fewer than MIN_DOCUMENTS = 10): no strategy is tested, as no k is judged
    few = [r for r in records if r["doc_id"] < 9]
    assert curve_decisions(curve, few, "g", "acc", True, 0.5, "point")["strategy_test"] is None
    assert curve_decisions(curve, few + [r for r in records if r["doc_id"] == 9], "g", "acc", True, 0.5,
                           "point")["strategy_test"] is not None


def test_healed_intervals_still_measure_a_real_healing_change():
    """The guard zeroes rounding only: a healed curve's paired change of real size keeps its interval."""
    rng = np.random.default_rng(2)
    totals = rng.uniform(300, 400, 12)
    records = []
    for label, scale in (("3", 1.0), ("unpruned healed", 0.9), ("3 healed", 0.95)):
        records += [{"removed": label, "task": "ppl", "doc_id": i, "tokens": 128, "total": float(t * scale
                     * (1 + rng.normal(0, 0.01)))} for i, t in enumerate(totals)]
    found = healed_intervals(records, "ppl", ["3"])["3"]
    assert all(i.stderr > 0 and i.lo < i.delta < i.hi for i in found)


# ---- sentences a reviewer would not sign (issue 48, item 5), each broken on purpose ----------------------------

def _findings(acc_base: list, acc_pruned: dict, signals: dict | None = None, **summary) -> str:
    from tests.unit.test_decisions import _prune_run

    from layerprobe.commands.prune.read import prune_findings

    run = _prune_run(acc_base, acc_pruned, signals)
    run.summary.update(summary)
    return " ".join(prune_findings(run))


def test_a_spearman_interval_that_includes_0_claims_no_direction():
    """Six layers and rho 0.66 (the demo's drift sweep): its interval includes 0, so 'moderately predicts' and
    'layers that change more cost more' are claims it cannot make; 0.9 over 30 layers can."""
    base = [1] * 70 + [0] * 30
    losses = [0, 4, 8, 12, 16, 20]
    pruned = {layer: [0] * lost + base[lost:] for layer, lost in enumerate(losses)}
    text = _findings(base, pruned, spearman_angular_delta=-0.66)
    assert "d(l, 1) does not measurably predict the cost of removal (Spearman with the cost +0.66" in text
    assert "which includes 0" in text and "moderately predicts" not in text and "cost more to remove" not in text
    firm = _findings(base, {layer: base for layer in range(30)}, spearman_angular_delta=-0.9)  # 30 layers
    assert "d(l, 1) strongly predicts the cost of removal" in firm


def test_two_signals_that_agree_say_nothing_of_a_third():
    """The bootstrap compares the best signal with the runner-up only: its sentence names those two, not 'the
    others' (a third signal with rho near 0 is plainly worse)."""
    from layerprobe.commands.prune.read import _trust

    test = {"best": "block_influence", "other": "angular", "difference": 0.016, "lo": -0.033, "hi": 0.085,
            "layers": 30, "resamples": 2000, "seed": 0, "separates": False}
    names = {"angular": "d(l, 1)", "block_influence": "Block Influence"}
    text = _trust(test, names, "block_influence", (0.21, 0.76))
    assert "neither of the two is to be preferred over the other" in text and "the others" not in text


def test_too_few_documents_states_no_detectable_effect_as_if_tested():
    """Two sequences: 'a kl change smaller than X cannot be seen' would describe a test the run does not make; the
    line says no change is tested and sizes what a test would miss from an uncertain stderr."""
    from layerprobe.report.findings import PREDATES_RECORDS, detectable_lines, predates_records

    d = {"kl": {"documents": 2, "stderr": 0.016, "family": 30, "level": 0.05 / 30, "power": 0.8, "change": 0.0637}}
    few = " ".join(detectable_lines({"metric": "kl", "records": "samples.csv.gz", "documents": 2,
                                     "min_documents": 10, "detectable": d}))
    assert "With 2 sequences (fewer than 10) no change is tested" in few and "cannot be seen" not in few
    d["kl"]["documents"] = 64
    enough = " ".join(detectable_lines({"metric": "kl", "records": "samples.csv.gz", "documents": 64,
                                        "min_documents": 10, "detectable": d}))
    assert "With 64 sequences, a kl change smaller than 0.0637 cannot be seen" in enough
    old = pd.DataFrame({"metric": ["acc"], "delta": [0.01]})  # a run from before records: no interval columns
    assert predates_records({"metric": "acc", "baseline": 0.3}, old) == [PREDATES_RECORDS]
    assert predates_records({"metric": "acc", "records": "samples.csv.gz"}, old) == []


def test_untested_main_rows_are_not_called_other_metrics():
    """Six documents (too few to test): the main metric's rows have intervals and family 0; the exploratory line
    is for other metrics and subtasks, so it leaves them out (the too-few line already says they are untested)."""
    base = [1, 0, 1, 1, 0, 1]
    text = _findings(base, {0: [0, 0, 0, 0, 0, 0], 1: [1, 0, 1, 1, 0, 1]})
    assert "Too few documents to test (6, fewer than 10)" in text and "other metrics or subtasks" not in text


def test_no_answer_changed_does_not_make_every_change_detectable():
    """Ten questions, most removals change no answer: their paired stderr is 0 and the median of 0 gave a minimum
    detectable effect of 0 ('an acc change smaller than 0 cannot be seen'). Such a row counts with its Newcombe
    interval's half-width / 1.96; the effect is then the normal-power formula by hand (scipy's quantiles)."""
    from layerprobe.commands.prune.decide import detectable_changes
    from layerprobe.metrics.decisions import newcombe_paired

    base = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    variants = {"1": base.copy(), "2": base.copy(), "3": np.array([0, 1, 0, 0, 0, 0, 0, 0, 0, 1], dtype=float)}
    records = [{"removed": k, "task": "t", "doc_id": i, "acc": float(v[i])}
               for k, v in (("unpruned", base), *variants.items()) for i in range(10)]
    rows = pd.DataFrame([{"removed": k, "layer": int(k), "block": 1, "metric": "acc", "baseline": base.mean(),
                          "pruned": v.mean(), "delta": v.mean() - base.mean()} for k, v in variants.items()])
    table = add_intervals(rows, records, "t", None, "acc")
    assert table["delta_stderr"].tolist()[:2] == [0.0, 0.0]
    z = stats.norm.ppf(0.975)
    lo, hi = newcombe_paired(base, base)
    d3 = variants["3"] - base
    se = sorted([(hi - lo) / (2 * z)] * 2 + [d3.std(ddof=1) / math.sqrt(10)])[1]
    found = detectable_changes(table, "acc", 3, 10)["acc"]
    assert found["stderr"] == pytest.approx(se, rel=1e-9)
    assert found["change"] == pytest.approx((stats.norm.ppf(1 - 0.05 / 6) + stats.norm.ppf(0.8)) * se, rel=1e-9)
    assert found["change"] > 0.2


def test_too_few_probe_sequences_state_no_healing_verdict():
    """A healed curve on 8 sequences keeps its intervals in curve.csv; the findings state none as a verdict."""
    from layerprobe.commands.prune.read_curve import curve_findings
    from layerprobe.runs.read import Run

    rows = [{"strategy": "angular", "k": 1, "fraction": 0.1, "removed": "3", "metric": "ppl", "baseline": 20.0,
             "score": 25.0, "delta": 5.0, "within": False, "healed_score": 18.0, "heal_change": -7.0,
             "heal_change_lo": -9.0, "heal_change_hi": -5.0, "healed_delta": 2.0, "healed_delta_lo": 1.0,
             "healed_delta_hi": 3.0}]
    summary = {"model": "m", "num_layers": 10, "metric": "ppl", "keep": 0.95, "baseline": 20.0, "heal_steps": 20,
               "healed_baseline": 16.0, "curve": {"angular": {"max_k": 0, "removed": "", "score": None}},
               "records": "samples.csv.gz", "documents": 8, "min_documents": 10}
    text = " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))
    assert "(too few sequences to test these changes)" in text and "excludes 0" not in text
    summary["documents"] = 64
    text = " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))
    assert "the repair's change -9 to -5, excludes 0" in text
