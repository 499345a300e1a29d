"""The decisions a prune or curve run states, each a test (metrics/decisions.py, metrics/paired.py), computed once
from its tables and per-document records into summary.json, where the findings read them:

- detectable: per metric, the smallest change the run could see (80% power, the family's Holm-worst level);
- chance_test: a multiple-choice score against chance, exact binomial, the unpruned model and every variant;
- family: which tests Holm's correction runs over;
- a curve's "k layers can go" (verdicts: non-inferiority on the worse end of the paired interval, k tested in order),
  the documents a failed verdict would need, and "best strategy" (strategy_test: paired tests at each k, Holm over
  the k's compared);
- a prune run's "signal to trust" (signal_test: a bootstrap over layers of the difference of two Spearman rhos).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from layerprobe.evaluation.metric import tolerance_edge, within
from layerprobe.metrics.decisions import (MIN_DOCUMENTS, ONE_SIDED, POWER, chance_test, detectable, documents_needed,
                                          spearman_difference)
from layerprobe.metrics.paired import ALPHA, RESAMPLES, SEED, holm, holm_adjusted, mcnemar
from layerprobe.report.findings import chance_of

BOUND_RULE = (f"non-inferiority: the worse end of the paired 95% interval (a one-sided {ONE_SIDED:.1%} bound) within "
              "the tolerance, each k tested alone; the largest k that passes")
POINT_RULE = "exploratory: the point estimate within the tolerance, no error control"


def _wide(records: Any) -> Any:
    """The records by column (evaluation/records.py wide_of), built once per run's decisions and passed on as it is."""
    from layerprobe.evaluation.records import wide_of

    return wide_of(records)


def documents(records: Any, metric: str) -> int:
    """How many documents the unpruned model's records hold for a metric's column (0 without records)."""
    from layerprobe.evaluation import records as records_file

    wide = _wide(records)
    return 0 if wide is None else records_file.documents(wide, metric)


def _median_stderr(values: Any) -> float:
    found = [float(v) for v in values if v == v and v is not None]
    return float(np.median(found)) if found else math.nan


def detectable_changes(table: Any, metric: str, family: int, n: int) -> dict:
    """{label: {documents, stderr (the median paired stderr over the variants), family, level, power, change}} for
    the metric's dP and, for multiple choice, its gold loglikelihood change. A variant whose paired stderr is 0 (a
    0/1 score no document of which changed) counts with its reported interval's half-width / 1.96 instead: a run
    that saw no change has not shown it would see every change."""
    main = table[table["metric"] == metric]
    if family < 1 and "delta_stderr" in main:  # too few documents to test: the family a test would run over
        family = int(main["delta_stderr"].notna().sum())
    out = {}
    for label, column in ((metric, "delta_stderr"), ("gold loglikelihood", "loglik_lo")):
        if column not in main or main[column].isna().all():
            continue
        if column == "loglik_lo":  # the loglikelihood's stderr from its interval (normal: conservative beside t)
            from layerprobe.evaluation.records import Z95
            stderr = _median_stderr((main["loglik_hi"] - main["loglik_lo"]) / (2 * Z95))
        else:  # a 0/1 change with no document changed has stderr 0: its Newcombe interval's width stands in
            from layerprobe.evaluation.records import Z95
            width = (main["delta_hi"] - main["delta_lo"]) / (2 * Z95) if "delta_hi" in main else main[column]
            stderr = _median_stderr(main[column].where(main[column] > 0, width))
        size = max(1, family)
        out[label] = {"documents": n, "stderr": stderr, "family": size, "level": ALPHA / size, "power": POWER,
                      "change": detectable(stderr, size) if stderr > 0 else None}
        if not stderr > 0:  # a zero-width interval sizes no test: no minimum detectable effect is claimed
            out[label]["why"] = (f"its paired stderr is {stderr:.3g} (the variants' intervals have no width), so no "
                                 "smallest detectable change can be stated; score more documents")
    return out


def _correct(records: Any, metric: str) -> dict[str, tuple[int, int]]:
    """Per variant label (and 'unpruned'): (documents right, documents) of a 0/1 metric, from the records."""
    from layerprobe.evaluation.records import statistic

    wide = _wide(records)
    values = wide.column(statistic(metric)[0]) if wide is not None else None
    if values is None or not np.isin(values.stack().to_numpy(dtype=float), (0.0, 1.0)).all():
        return {}
    right, scored = values.sum(), values.notna().sum()  # every column at once (0/1 values: exact sums)
    return {str(label): (int(right[label]), int(scored[label])) for label in values.columns
            if not str(label).endswith(" healed")}


def chance_tests(records: Any, task: str, metric: str) -> dict | None:
    """A multiple-choice accuracy against chance: an exact two-sided binomial test of the unpruned model and of every
    variant (uncorrected, alpha 0.05: a score it cannot tell from chance is named, not claimed at chance)."""
    from layerprobe.evaluation.records import UNPRUNED

    chance = chance_of(task, metric)
    counts = _correct(records, metric) if chance is not None else {}
    if UNPRUNED not in counts:
        return None
    tests = {label: chance_test(k, n, chance) for label, (k, n) in counts.items() if n}
    base = tests[UNPRUNED]
    return {"chance": chance, "test": "exact binomial, two-sided, alpha 0.05, each score alone",
            "baseline": {"correct": base.correct, "n": base.n, "p": base.p},
            "variants_at_chance": [label for label, t in tests.items() if label != UNPRUNED and not t.distinguishable],
            "variants_tested": len(tests) - 1,
            "p": {label: t.p for label, t in tests.items() if label != UNPRUNED}}


def family_of(table: Any, metric: str, family: str) -> dict:
    main = table[table["metric"] == metric]
    size = int(main["family"].max()) if "family" in main and len(main) else 0
    return {"name": family, "metric": metric, "size": size,
            "rule": "Holm over the main metric's variants; other rows exploratory" if family == "main"
            else "Holm over every row of the table"}


def prune_decisions(table: Any, records: Any, task: str, metric: str, family: str = "main", cluster: str = "none",
                    groups: dict | None = None) -> dict:
    """The summary keys of a one-layer (or block) sweep's decisions. `clustered` compares the two estimands of a
    group's score whichever prune.csv carries (interval_estimand): its stratified side recomputed where prune.csv
    is clustered."""
    from layerprobe.evaluation.records import add_intervals, interval_estimand

    records = _wide(records)  # one records table for every decision below
    n = documents(records, metric)
    fam = family_of(table, metric, family)
    estimand = interval_estimand(records, metric, task, groups, cluster)
    stratified = table
    if estimand is not None and estimand["name"] == "clustered":
        stratified = add_intervals(table, records, task, groups, metric, family, "none")
    return {"documents": n, "min_documents": MIN_DOCUMENTS, "family": fam,
            "detectable": detectable_changes(table, metric, fam["size"], n) if n else {},
            "chance_test": chance_tests(records, task, metric),
            "interval_estimand": estimand,
            "clustered": clustered(stratified, records, metric) if "/" not in metric else None}


def clustered(table: Any, records: Any, metric: str) -> dict | None:
    """A task of several subtasks (MMLU's subjects): beside the stratified intervals of `table` (subjects fixed:
    the score over these subjects), subject-clustered ones (CR1, t with G - 1 df: questions of a subject, sharing a
    few-shot prefix, may move together), for the main metric and the gold loglikelihood, with Holm over the same
    family, and the stratified verdicts (stratified_measurable); None for a task of one subtask or a score that is
    not a mean."""
    from layerprobe.evaluation.records import LOGLIK, UNPRUNED, statistic
    from layerprobe.metrics.decisions import clustered_mean_change

    from layerprobe.metrics.decisions import MIN_CLUSTERS

    wide = _wide(records)
    column, stat = statistic(metric)
    if wide is None or stat.kind != "mean" or wide.column(column) is None:
        return None
    out: dict = {"estimand": "cluster-robust (CR1) by subtask, t with G - 1 df, beside prune.csv's stratified one"}
    g = len(set(wide.column(column).index.get_level_values("task")))
    if 1 < g < MIN_CLUSTERS:  # t on G - 1 df from a handful of clusters: no interval claimed, and why
        return {**out, "clusters": g, "why": f"{g} subtasks give {g - 1} degree{'s' if g > 2 else ''} of freedom, "
                f"too few for a cluster-robust interval (at least {MIN_CLUSTERS} subtasks)"}
    main = table[(table["metric"] == metric)]
    for label, name in ((metric, column), ("gold loglikelihood", LOGLIK.get(column))):
        values = wide.column(name) if name else None
        if values is None or UNPRUNED not in values:
            continue
        tasks = values.index.get_level_values("task").to_numpy()
        if len(np.unique(tasks)) < 2:
            return None
        found = {}
        for removed in main["removed"].astype(str):
            if removed in values:
                pair = values[[UNPRUNED, removed]].dropna()
                found[removed] = clustered_mean_change(pair[UNPRUNED], pair[removed],
                                                       pair.index.get_level_values("task"))
        flags = holm([f[4] for f in found.values()])
        from layerprobe.evaluation.records import Z95

        indexed = main.set_index(main["removed"].astype(str))
        stratified = (indexed["delta_stderr"] if label == metric else
                      (indexed["loglik_hi"] - indexed["loglik_lo"]) / (2 * Z95) if "loglik_hi" in indexed else None)
        ratios = [f[1] / stratified[r] for r, f in found.items()
                  if stratified is not None and stratified.get(r, 0) and stratified[r] == stratified[r]]
        out["clusters"] = int(len(np.unique(tasks)))
        flag_column = "significant" if label == metric else "loglik_significant"
        out[label] = {"measurable": [r for r, flag in zip(found, flags) if flag],
                      "stratified_measurable": [str(r) for r in indexed.index[indexed[flag_column].astype(bool)]]
                      if flag_column in indexed else None,
                      "intervals": {r: [f[0], f[2], f[3], f[4]] for r, f in found.items()},
                      "stderr_ratio_median": float(np.median(ratios)) if ratios else None}
    return out if len(out) > 1 else None


# ---- curves ------------------------------------------------------------------------------------------------------

def judged(row: dict, higher: bool, keep_by: str) -> float:
    """The score --keep judges: the score itself (point), or the worse end of its paired 95% interval (bound; NaN,
    never within, where the records give no interval: a bound that does not exist is not judged)."""
    if keep_by != "bound":
        return row["pruned"] if "pruned" in row else row["score"]
    worse_end = row.get("delta_lo" if higher else "delta_hi", math.nan)
    return math.nan if worse_end is None or worse_end != worse_end else row["baseline"] + worse_end


def verdicts(table: Any, keep_by: str, margin: float | None = None, higher: bool = True, n: int = 0) -> dict:
    """Per strategy, the largest k that can go (its `within`) and what it removes. bound: also the largest k beyond
    it whose point is within the tolerance (`next_k`) and how many documents its bound would need to pass
    (`next_needed`) if its change and spread held."""
    found = {}
    for strategy, rows in table.groupby("strategy", sort=False):
        rows = rows.sort_values("k")
        ok = rows[rows["within"].astype(bool)]
        best = ok.loc[ok["k"].idxmax()] if len(ok) else None
        verdict = {"max_k": int(best["k"]) if best is not None else 0,
                   "removed": str(best["removed"]) if best is not None else "",
                   "score": float(best["score"]) if best is not None else None}
        if keep_by == "bound" and margin is not None and n:
            good = rows["delta"] if higher else -rows["delta"]
            beyond = rows[(good >= -margin) & (rows["k"] > verdict["max_k"])]
            if len(beyond):  # the largest k whose point passes: what its bound would take
                row = beyond.iloc[-1]
                verdict["next_k"] = int(row["k"])
                verdict["next_needed"] = documents_needed(float(row["delta"]), float(row.get("delta_stderr", math.nan)),
                                                          n, margin, higher)
        found[strategy] = verdict
    return found


def margin_of(metric: str, higher: bool, baseline: float, keep: float) -> float:
    """How far the score may move the bad way and stay within the tolerance."""
    edge = tolerance_edge(metric, higher, baseline, keep)
    return (baseline - edge) if higher else (edge - baseline)


def _pair_test(wide: Any, metric: str, mine: str, other: str, clustered: bool = False) -> tuple[float, float] | None:
    """(score(mine) - score(other), its p-value) on the same documents: McNemar's exact test for 0/1 scores, else
    the paired interval's (evaluation/records.py); clustered (the run's intervals are cluster-robust by subtask):
    the subtask-clustered paired t test (CR1, G - 1 df) of a mean score, as prune.csv's intervals are."""
    from layerprobe.evaluation.records import paired_change, statistic
    from layerprobe.metrics.decisions import clustered_mean_change

    column, stat = statistic(metric)
    found = paired_change(wide, column, stat, other, mine)
    if found.p != found.p:
        return None
    values = wide.column(column)
    if clustered and stat.kind == "mean":
        tasks = values.index.get_level_values("task")
        change, _, _, _, p = clustered_mean_change(values[other].to_numpy(), values[mine].to_numpy(), tasks)
        return (change, p) if p == p else None
    exact = mcnemar(values[other].to_numpy(), values[mine].to_numpy()) if stat.kind == "mean" else None
    return found.delta, exact if exact is not None else found.p


def strategy_test(table: Any, records: Any, metric: str, higher: bool, candidate: str,
                  clustered: bool = False) -> dict | None:
    """The candidate strategy against each other: a paired test at every k where their sets differ, on the same
    documents, Holm over the k's compared (per pair); clustered: each test cluster-robust by subtask (CR1, t with
    G - 1 df), the estimand of the run's intervals. None without records."""
    wide = _wide(records)
    if wide is None:
        return None
    sets = {(r.strategy, int(r.k)): str(r.removed) for r in table.itertuples()}
    against = {}
    for other in dict.fromkeys(table["strategy"]):
        if other == candidate:
            continue
        tests = {}
        for (strategy, k), label in sets.items():
            if strategy == candidate and (other, k) in sets and sets[(other, k)] != label:
                found = _pair_test(wide, metric, label, sets[(other, k)], clustered)
                if found is not None:
                    tests[k] = found
        ks = sorted(tests)
        flags = holm([tests[k][1] for k in ks])
        adjusted = holm_adjusted([tests[k][1] for k in ks])
        good = [k for k, flag in zip(ks, flags) if flag and (tests[k][0] > 0) == higher]
        bad = [k for k, flag in zip(ks, flags) if flag and (tests[k][0] > 0) != higher]
        against[other] = {"compared": len(ks), "better_at": good, "worse_at": bad,
                          "smallest_adjusted_p": min(adjusted) if adjusted else None}
    measured = [o for o, t in against.items() if t["better_at"] and not t["worse_at"]]
    test = (STRATEGY_TEST_CLUSTERED if clustered else "paired McNemar's exact test (0/1 scores) or paired t at each k "
            "on the same documents, Holm over the k's compared per pair")
    return {"test": test, "candidate": candidate, "against": against, "clustered": clustered,
            "best": candidate if against and len(measured) == len(against) else None}


STRATEGY_TEST_CLUSTERED = ("paired t at each k on the same documents, cluster-robust by subtask (CR1, Student's t with "
                           "G - 1 df, as the run's intervals), Holm over the k's compared per pair")


def _candidate(table: Any, found: dict, higher: bool) -> str:
    """The strategy with the most layers that can go; ties: the better mean score over the k's."""
    mean = table.groupby("strategy", sort=False)["score"].mean()
    return max(found, key=lambda s: (found[s]["max_k"], mean[s] if higher else -mean[s]))


def curve_decisions(table: Any, records: Any, task: str, metric: str, higher: bool, keep: float, keep_by: str,
                    scores: Any = None, estimand: dict | None = None) -> dict:
    """The summary keys of a curve's decisions (`curve` itself among them). Under bound with fewer than
    MIN_DOCUMENTS documents no k is judged: `table`'s `within` is set False in place (one probe sequence has no
    interval at all; two have one with 1 degree of freedom), and no strategy is tested (strategy_test null).
    estimand: the run's interval_estimand (records.py); where it is clustered by subtask, the strategy test is too."""
    records = _wide(records)  # one records table for every decision below
    n = documents(records, metric)
    if keep_by == "bound" and n < MIN_DOCUMENTS:
        table["within"] = False
    baseline = float(table["baseline"].iloc[0])
    found = verdicts(table, keep_by, margin_of(metric, higher, baseline, keep), higher, n)
    family = int(table["family"].max()) if "family" in table and len(table) else 0
    out = {"curve": found, "documents": n, "min_documents": MIN_DOCUMENTS,
           "keep_rule": BOUND_RULE if keep_by == "bound" else POINT_RULE,
           "keep_level": ONE_SIDED if keep_by == "bound" else None,
           "strategy_test": strategy_test(table, records, metric, higher, _candidate(table, found, higher),
                                          (estimand or {}).get("name") == "clustered")
           if len(found) > 1 and n >= MIN_DOCUMENTS else None,  # too few documents: no strategy is tested
           "detectable": detectable_changes(scores if scores is not None else table, metric, family, n) if n else {},
           "chance_test": chance_tests(records, task, metric)}
    return out


def curve_within(table: Any, metric: str, higher: bool, keep: float, keep_by: str) -> list[bool]:
    """curve.csv's `within` of each row under --keep-by."""
    return [within(metric, higher, float(r["baseline"]), judged(r, higher, keep_by), keep)
            for r in table.to_dict("records")]


# ---- which cheap signal to trust --------------------------------------------------------------------------------

def signal_test(signals: dict[str, np.ndarray], cost: np.ndarray) -> dict | None:
    """The cheap signal that best predicts the cost of removing a layer against the runner-up: the difference of
    their Spearman correlations with the cost, with a seeded bootstrap over layers."""
    from layerprobe.metrics.stats import spearman

    rhos = {name: spearman(values, cost) for name, values in signals.items()}
    rhos = {name: rho for name, rho in rhos.items() if rho is not None}
    if len(rhos) < 2 or len(cost) < 5:
        return None
    best, other = sorted(rhos, key=lambda name: -rhos[name])[:2]
    found = spearman_difference(signals[best], signals[other], cost, RESAMPLES, SEED)
    return {"best": best, "other": other, "difference": found.difference, "lo": found.lo, "hi": found.hi,
            "layers": int(len(cost)), "resamples": found.resamples, "seed": found.seed, "separates": found.separates,
            "test": "percentile bootstrap over layers of rho(best, cost) - rho(other, cost)"}
