"""How report and compare read a prune run (the record's PRUNE_KIND names these): its findings, its per-layer table,
its line of the overlay across runs, and its comparer; and Noise, the per-document records' paired intervals that
decide a prune or curve check with the tolerance."""

from __future__ import annotations

import math
from typing import Any

from layerprobe.errors import RunError
from layerprobe.evaluation.metric import has_baseline
from layerprobe.metrics.paired import holm_adjusted
from layerprobe.metrics.stats import spearman_interval
from layerprobe.report.findings import (chance_lines, chance_of, detectable_lines, ends, ends_text, has_intervals,
                                        predates_records, ranked, signed, where_in_depth)
from layerprobe.runs.compare import NO_RECORDS, Check, Comparison, column_checks, outside, same_keys
from layerprobe.runs.read import Run


def interval_text(row: Any) -> str:
    return f"dP {signed(row.delta)}, 95% interval {row.delta_lo:+.3g} to {row.delta_hi:+.3g}"


def _listed(rows: Any, most: int = 6) -> str:
    shown = ", ".join(f"{r.removed} ({interval_text(r)})" for r in rows.head(most).itertuples())
    return shown + (f", and {len(rows) - most} more (prune.csv)" if len(rows) > most else "")


def _measured(main: Any, higher: bool, s: dict) -> list[str]:
    """What the paired intervals say: the removals measurably worse and better (Holm's correction), nothing
    about the rest but their count."""
    order = ranked(main, higher)
    significant = order["significant"].astype(bool)
    worse = order[significant & (order["cost"] > 0)][::-1]  # costliest first
    better = order[significant & (order["cost"] < 0)]
    n = len(order)
    size = int(order["family"].max()) if "family" in order and order["family"].notna().any() else n
    rule = (f"the paired 95% interval excludes 0 and the change survives Holm's correction over a family of "
            f"{size} tests")
    out = []
    if worse.empty and better.empty:
        known = int(order["delta_lo"].notna().sum())
        out.append(f"No removal changes {s['metric']} measurably: none of the {known} removals with an interval "
                   f"passes ({rule}). Their order is not established at this many documents; score more for a finer "
                   "answer.")
        return out + _loglik_measured(order)
    if len(worse):
        out.append(f"Measurably worse without {len(worse)} of {n} removals ({rule}): {_listed(worse)}.")
    if len(better):
        out.append(f"Measurably better without {len(better)} of {n} ({rule}): {_listed(better)}.")
    rest = n - len(worse) - len(better)
    if rest:
        out.append(f"The other {rest} removals are not measurably different from the unpruned model.")
        out += _loglik_measured(order)
    if s.get("block", 1) == 1 and len(worse) and len(main) >= 3:
        out.append(where_in_depth(sorted(int(x) for x in main["layer"]), [int(x) for x in worse["layer"].head(3)],
                                  f"The {min(3, len(worse))} costliest measurable removals" if len(worse) > 1
                                  else "The one measurable removal", "sit" if len(worse) > 1 else "sits"))
    return out


def _loglik_measured(order: Any) -> list[str]:
    """Multiple choice: what the gold answer's loglikelihood (continuous, paired: it moves where 0/1 accuracy does
    not) says, with the same rule as dP: Holm over the removals that have an interval (evaluation/records.py)."""
    from layerprobe.evaluation.records import loglik_flags

    if "loglik_lo" not in order or order["loglik_lo"].isna().all():
        return []
    known = order.dropna(subset=["loglik_delta", "loglik_lo", "loglik_hi"])
    flagged = known[loglik_flags(known)]
    if flagged.empty:
        return [f"The gold answer's loglikelihood (a continuous paired score) does not separate them either: no "
                f"change survives Holm's correction over the {len(known)} removals."]
    lower = flagged[flagged["loglik_delta"] < 0].sort_values("loglik_delta")
    higher = flagged[flagged["loglik_delta"] > 0].sort_values("loglik_delta", ascending=False)
    shown = lambda rows: ", ".join(f"{r.removed} ({r.loglik_delta:+.3g}, {r.loglik_lo:+.3g} to {r.loglik_hi:+.3g})"
                                   for r in rows.head(5).itertuples())
    text = (f"The gold answer's loglikelihood (mean paired change in nats, 95% interval; Holm over {len(known)} "
            f"removals) separates them: it drops measurably without {len(lower)} of {len(known)}")
    text += f", most without {shown(lower)}" if len(lower) else ""
    text += f"; it rises without {len(higher)}: {shown(higher)}" if len(higher) else ""
    return [text + "."] + _margin_measured(known, lower)


NO_MARGIN = ("This run's records keep only the gold answer's loglikelihood (not every choice's), so a drop in it "
             "cannot be told from every choice getting less likely alike: it is not shown that the model got less "
             "sure of the right answer; a re-run records every choice and tests the margin over the best wrong one.")


def _margin_measured(known: Any, lower: Any) -> list[str]:
    """Where the gold loglikelihood drops measurably: did the margin over the best wrong choice drop too (the model
    got less sure of the right answer) or not (every choice got less likely alike)? Holm over the same removals."""
    if lower.empty:
        return []
    if "margin_significant" not in known or known["margin_lo"].isna().all():
        return [NO_MARGIN]
    surer = lower[lower["margin_significant"].astype(bool) & (lower["margin_delta"] < 0)]
    alike = lower.drop(index=surer.index)
    shown = lambda rows: ", ".join(f"{r.removed} (margin {r.margin_delta:+.3g}, {r.margin_lo:+.3g} to "
                                   f"{r.margin_hi:+.3g})" for r in rows.head(5).itertuples())
    out = []
    if len(surer):
        out.append(f"Without {len(surer)} of those {len(lower)} the model got less sure of the right answer: the "
                   "margin (the gold choice's loglikelihood minus the best wrong choice's, nats; Holm over "
                   f"{len(known)}) drops measurably too: {shown(surer)}.")
    if len(alike):
        out.append(f"Without {len(alike)} of them the drop cannot be told from everything getting less likely: the "
                   "gold answer's loglikelihood drops but its margin over the best wrong choice does not measurably "
                   f"(Holm over {len(known)}): {shown(alike)}.")
    return out


def _point_ranking(main: Any, higher: bool, s: dict, few: bool = False) -> list[str]:
    """A run without intervals (or with too few documents to test): the ranking by point estimate, said to be one,
    or nothing where it is noise."""
    order = ranked(main, higher)
    stderr = main["baseline_stderr"].dropna() if "baseline_stderr" in main and not few else []
    if s.get("records") and not has_intervals(main) and not few:
        return [f"Too few documents for an interval of any dP ({s['metric']}): no removal can be told from noise, "
                "so none is ranked; score more documents."]
    if len(stderr) and float(order["cost"].abs().max()) <= 2 * float(stderr.iloc[0]):
        return [f"Every |dP| is within twice the baseline's standard error ({2 * float(stderr.iloc[0]):.3g}): no "
                "removal can be told from noise, so none is ranked."]
    cheap, costly = ends(main, higher)
    if len(main) < 2:
        return ["One removal scored: nothing to rank."]
    if not cheap:
        return [f"Every removal gives the same {s['metric']}: tied, none is cheaper or costlier than another."]
    why = "too few documents to test" if few else "this run has no per-document records, so no interval"
    dp = lambda r: f"dP {signed(r.delta)}"
    out = [f"Cheapest to remove, by point estimate ({why}): {ends_text(cheap, dp)}; costliest: "
           f"{ends_text(costly, dp)}."]
    layers = [int(x) for rows in cheap for x in rows["layer"]]
    if s.get("block", 1) == 1 and len(main) >= 3:
        out.append(where_in_depth(sorted(int(x) for x in main["layer"]), layers,
                                  f"By point estimate, the {_count(len(layers))} cheapest to remove"
                                  + (" (a tie)" if len(cheap) == 1 and len(layers) > 1 else ""),
                                  "sit" if len(layers) > 1 else "sits"))
    return out


def _count(n: int) -> str:
    return "layer" if n == 1 else f"{n} layers"


def prune_findings(run: Run) -> list[str]:
    s = run.summary
    table = run.tables["prune"]
    main = table[table["metric"] == s["metric"]]
    higher = s.get("higher_is_better", True)
    out = [] if not has_baseline(s["metric"]) else [f"Unpruned {s['metric']} = {s['baseline']:.4g}."]
    out += predates_records(s, main) + detectable_lines(s)
    chance = at_chance(s, main) if not s.get("chance_test") else None
    if chance is not None:
        out.append(f"The unpruned model scores at chance ({s['metric']} {s['baseline']:.3g}, chance {chance:g}): "
                   "a score at chance has little room to fall, so the ranking below says little; use a task "
                   "the model can do, or more documents.")
    out += chance_lines(s)
    few = bool(s.get("records")) and s.get("documents") is not None and s["documents"] < (s.get("min_documents") or 0)
    if few:
        out.append(f"Too few documents to test ({s['documents']}, fewer than {s['min_documents']}): no removal is "
                   "tested; the ranking below is by point estimate only.")
        out += _point_ranking(main, higher, s, few=True)
    else:
        out += _measured(main, higher, s) if has_intervals(main) else _point_ranking(main, higher, s)
    out += _clustered(s, main)
    out += _exploratory(table, s)
    if "layer_type" in main and main["layer_type"].nunique() > 1 and s.get("block", 1) == 1:
        out.append(_by_kind(main, ranked(main, higher), higher))
    out += _correlations(s, len(main), higher)
    return out


def _clustered(s: dict, main: Any) -> list[str]:
    """A task of several subtasks: which estimand prune.csv's intervals carry (interval_estimand), in words, and
    what the other one says beside it (summary.json clustered)."""
    c, estimand = s.get("clustered"), s.get("interval_estimand") or {}
    if not c or not has_intervals(main):
        return []
    if c.get("why"):
        return [f"The estimand: prune.csv's intervals treat the {c['clusters']} subtasks as fixed strata (documents "
                f"independent); no cluster-robust interval is claimed beside them: {c['why']}."]
    is_clustered = estimand.get("name") == "clustered"
    parts = []
    for label in (s["metric"], "gold loglikelihood"):
        if label not in c:
            continue
        column = "significant" if label == s["metric"] else "loglik_significant"
        stratified = c[label].get("stratified_measurable")
        count = len(stratified) if stratified is not None else (
            int(main[column].astype(bool).sum()) if column in main else None)
        ratio = c[label].get("stderr_ratio_median")
        parts.append(f"{label}: {len(c[label]['measurable'])} measurable clustered against {count} stratified"
                     + (f" (clustered stderr a median {ratio:.2f}x the stratified)" if ratio else ""))
    g = c["clusters"]
    if is_clustered:
        head = (f"The estimand: prune.csv's intervals and Holm flags are cluster-robust by subtask (CR1, Student's t "
                f"with {g - 1} df over the {g} subtasks, --cluster subtask, the default: questions of a subtask share "
                "its few-shot prefix and may move together, so they are not taken as independent draws); treating the "
                "subtasks as fixed strata instead (--cluster none) would give, Holm over the same family: ")
    else:
        why = (f" (--cluster subtask clusters only a group of at least {estimand['min_clusters']} subtasks)"
               if estimand.get("cluster") == "subtask" else "")
        head = (f"The estimand: prune.csv's intervals treat the {g} subtasks as fixed strata{why} (the score over "
                "these subtasks, documents independent); clustered by subtask (CR1, t with "
                f"{g - 1} df, for questions of a subtask that share a few-shot prefix and may move together), "
                "Holm over the same family: ")
    return [head + "; ".join(parts) + "."]


def _exploratory(table: Any, s: dict) -> list[str]:
    """The rows outside the Holm family (--family main: other metrics, per-subtask rows): how many intervals
    exclude 0, said to be exploratory."""
    if "family" not in table or table["delta_lo"].isna().all() or s.get("family", {}).get("name") == "all":
        return []
    outside = table[(table["family"] == 0) & table["delta_lo"].notna()]
    outside = outside[outside["metric"] != s.get("metric")]  # the main metric's untested rows (too few documents)
    if outside.empty:  # are said so where they are ranked
        return []
    apart = outside[(outside["delta_lo"] > 0) | (outside["delta_hi"] < 0)]
    named = ", ".join(f"{r.metric} without {r.removed}" for r in apart.head(6).itertuples())
    more = f", and {len(apart) - 6} more" if len(apart) > 6 else ""
    text = (f"Exploratory (outside the Holm family, no error control; --family all tests them): {len(outside)} rows "
            f"of other metrics or subtasks; {len(apart)} of their uncorrected 95% intervals exclude 0")
    return [text + (f": {named}{more}." if len(apart) else ".")]


COST_SIGN = {True: -1, False: 1}  # higher is better -> the cost of removal is -dP; lower is better (kl, ppl) -> dP


def cost_rho(rho: float, higher: bool) -> float:
    """A Spearman correlation with dP (summary.json's spearman_angular_delta, spearman_delta) as one with the cost of
    removal, the one convention every finding states: positive where layers scored higher cost more to remove."""
    return COST_SIGN[higher] * rho


def _correlations(s: dict, n: int, higher: bool) -> list[str]:
    """How well d(l, 1) and the other cheap signals predict the measured cost, each with its interval: a signal is
    called the one to trust only where its interval excludes 0 on the predicting side. Every rho is stated with the
    cost of removal (cost_rho), never with dP, whose sign flips with the metric's direction."""
    out = []
    rho = s.get("spearman_angular_delta")
    if rho is not None:
        cost = cost_rho(rho, higher)
        strength = "strongly" if abs(cost) >= 0.7 else "moderately" if abs(cost) >= 0.4 else "weakly"
        how = ("layers that change the representation more cost more to remove" if cost > 0
               else "the opposite of the usual reading: layers that change the representation more cost less to remove")
        interval = spearman_interval(cost, n)
        if interval is None:
            out.append(f"Spearman of d(l, 1) with the cost of removal = {cost:+.2f} over only {n} layers: too few "
                       "layers to tell.")
        else:
            low, high = interval
            sign = f"the cost is {'-dP: higher is better' if higher else 'dP: lower is better'}"
            if low > 0 or high < 0:
                out.append(f"The angular distance d(l, 1) {strength} predicts the cost of removal (Spearman with the "
                           f"cost {cost:+.2f}, 95% interval {low:+.2f} to {high:+.2f} over {n} layers; {sign}): {how}.")
            else:  # an interval that includes 0 supports no direction, strong or weak
                out.append(f"The angular distance d(l, 1) does not measurably predict the cost of removal (Spearman "
                           f"with the cost {cost:+.2f}, 95% interval {low:+.2f} to {high:+.2f} over {n} layers, which "
                           f"includes 0; {sign}).")
    signals = s.get("spearman_delta") or {}
    if len(signals) > 1:
        names = {"angular": "d(l, 1)", "block_influence": "Block Influence", "logit_lens_kl": "logit-lens KL"}
        ranked_signals = sorted(signals.items(), key=lambda item: -cost_rho(item[1], higher))
        best, best_rho = ranked_signals[0]
        listed = ", ".join(f"{names.get(k, k)} {cost_rho(v, higher):+.2f}" for k, v in ranked_signals)
        head = f"Cheap signals against the measured cost (Spearman with the cost of removal): {listed}; "
        interval = spearman_interval(cost_rho(best_rho, higher), n)
        if interval is None:
            out.append(head + f"too few layers ({n}) to tell which to trust.")
        elif cost_rho(best_rho, higher) >= 0.4 and interval[0] > 0:
            out.append(head + _trust(s.get("signal_test"), names, best, interval))
        else:
            out.append(head + "none predicts it well here (below 0.4, or an interval that includes 0): measure "
                       "with prune.")
    return out


def _trust(test: dict | None, names: dict, best: str, interval: tuple) -> str:
    """'The one to trust' only where the bootstrap over layers separates the best signal from the runner-up."""
    alone = f"{names.get(best, best)} predicts it (95% interval {interval[0]:+.2f} to {interval[1]:+.2f})"
    if not test or test.get("best") != best:
        return alone + "; whether it predicts better than the others is untested here."
    how = (f"percentile bootstrap over the {test['layers']} layers, {test['resamples']:,} resamples, seed "
           f"{test['seed']}")
    other = names.get(test["other"], test["other"])
    gap = f"{test['difference']:+.3f}, 95% interval {test['lo']:+.3f} to {test['hi']:+.3f}"
    if test.get("separates"):
        return (f"the one to trust for this model is {names.get(best, best)}: its rho exceeds {other}'s by {gap} "
                f"({how}).")
    return (f"{alone}, but the signals agree: its rho minus {other}'s is {gap} ({how}), so neither of the two is "
            "to be preferred over the other.")


def at_chance(summary: dict, main: Any) -> float | None:
    """The chance level when the unpruned score is within two standard errors of it (or below it), else None."""
    chance = chance_of(summary.get("task", ""), summary.get("metric", ""))
    baseline = summary.get("baseline")
    if chance is None or baseline is None:
        return None
    stderr = main["baseline_stderr"].dropna() if "baseline_stderr" in main else []
    margin = 2 * float(stderr.iloc[0]) if len(stderr) else 0.02
    return chance if baseline <= chance + margin else None


def _by_kind(main: Any, ordered: Any, higher: bool) -> str:
    """A hybrid's layers by kind: which kind the cheapest removals are, and each kind's median cost."""
    cheapest = ordered.head(max(1, len(ordered) // 3))
    counts = cheapest["layer_type"].value_counts()
    medians = main.groupby("layer_type")["delta"].median()
    costs = ", ".join(f"{kind.replace('_', ' ')} {medians[kind]:+.3g} ({int((main['layer_type'] == kind).sum())} "
                      "layers)" for kind in medians.sort_values(ascending=not higher).index)
    share = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())
    return (f"By kind of layer: of the {len(cheapest)} cheapest to remove, {share}; median dP per kind: {costs}.")


def prune_table(run: Run) -> Any:
    table, s = run.tables["prune"], run.summary
    main = table[table["metric"] == s["metric"]]
    kinds = ["layer_type"] if "layer_type" in main and main["layer_type"].dropna().nunique() > 1 else []
    shown = main[["removed", *kinds, "baseline", "pruned", "delta"]].rename(columns={"delta": "dP", "layer_type": "kind"})
    if "delta_lo" not in main or not main["delta_lo"].notna().any():
        return shown
    intervals = [f"{lo:+.3g} to {hi:+.3g}" if lo == lo else "" for lo, hi in zip(main["delta_lo"], main["delta_hi"])]
    if s.get("documents") is not None and s["documents"] < (s.get("min_documents") or 0):  # ranked, not tested
        return shown.assign(**{"95% interval (too few documents to test)": intervals})
    # the interval is each removal's own (uncorrected); Holm's adjusted p says why one that excludes 0 can still not
    # be measurable once every removal of the sweep is tested
    adjusted = holm_adjusted(main["p_value"].tolist()) if "p_value" in main else [float("nan")] * len(main)
    return shown.assign(**{"95% interval (uncorrected)": intervals,
                           "p (Holm-adjusted)": [f"{p:.2g}" if p == p else "" for p in adjusted],
                           "measurable (Holm)": ["yes" if flag else "" for flag in main["significant"].astype(bool)]})


def prune_by_depth(run: Run) -> tuple[Any, Any]:
    """(start layer, rank of the cost of removing it, 0 = cheapest .. 1 = costliest) for the overlay across runs:
    runs of different metrics (drift, kl, ppl, accuracy) and scales (a ppl of 40,000 for layer 0) share one axis."""
    t = run.tables["prune"]
    t = t[t["metric"] == run.summary["metric"]].sort_values("layer")
    cost = -t["delta"] if run.summary.get("higher_is_better", True) else t["delta"]
    ranks = cost.rank(method="average") - 1
    return t["layer"], ranks / max(1, len(t) - 1)


class Noise:
    """Both runs' per-document records, when both hold them: the paired interval of each compared change decides
    with the tolerance (a change within its interval is sampling noise, never a regression)."""

    def __init__(self, old: Run, new: Run) -> None:
        from layerprobe.evaluation import records

        self.records = records
        frames = [records.read_frame(run.folder) if run.folder is not None else None for run in (old, new)]
        self.wide = [records.Wide(f) for f in frames] if all(f is not None for f in frames) else None
        self.task, self.groups = old.summary.get("task", ""), old.summary.get("groups") or {}
        self.stderrs: dict[str, list[float]] = {}  # per metric, the paired stderr of every compared change
        self.untested: list[str] = []  # why a check had no paired interval (Comparison.untested, the verdict)

    def detectable(self, name: str) -> list[str]:
        """compare's notes: per metric, the smallest change its paired intervals could see (80% power, each check
        alone at 0.05, as compare decides them), from the median stderr of the compared changes."""
        from layerprobe.metrics.decisions import detectable

        out = []
        for metric, found in self.stderrs.items():
            smallest = detectable(sorted(found)[len(found) // 2], 1) if found else 0.0
            if smallest > 1e-12:  # identical records: every change is exactly 0, nothing to state
                out.append(f"{repr(name) + ': ' if name else ''}a change in {metric} smaller than {smallest:.3g} cannot be seen by these "
                           f"records' paired intervals (minimum detectable effect: 80% power, two-sided 0.05 per "
                           f"check, median stderr over {len(found)} checks); a pass below it is not equivalence")
        return out

    def check(self, check: Check, metric: str, label: str | None, worse: float | None = None,
              score_only: bool = False) -> Check:
        """The check decided by tolerance and interval together where the records give one (worse: the change in
        the bad direction, for the baseline check; score_only: a curve point's score, not its dP)."""
        if self.wide is None:
            self.untested.append(NO_RECORDS)
            return check
        found = self.records.change_interval(*self.wide, metric, self.task, self.groups, label, score_only)
        if found is None:
            self.untested.append("the runs' per-document records cover different documents")
            return check
        if not math.isfinite(found.lo):
            self.untested.append("the runs' per-document records of the same documents give no paired interval "
                                 "(too few documents)")
            return check
        if abs(found.delta - check.delta) > 1e-9 * max(1.0, abs(check.delta)):
            self.untested.append("the runs' per-document records do not reproduce their tables' numbers")
            return check  # no interval, or records that do not give the tables' numbers: the tolerance alone
        if found.stderr == found.stderr:
            self.stderrs.setdefault(metric, []).append(found.stderr)
        beyond = found.lo > 0 or found.hi < 0
        if worse is not None:  # only the bad direction fails a baseline
            beyond = beyond and worse > 0
        check.interval, check.rule = [found.lo, found.hi], "tolerance and paired interval"
        check.failed = check.failed and beyond
        return check


def compare_prune(old: Run, new: Run, tol: dict, into: Comparison, name: str) -> None:
    if old.summary.get("task") != new.summary.get("task"):
        raise RunError(f"prune runs of different tasks ({old.summary.get('task')} vs {new.summary.get('task')}): "
                       "compare runs of the same --task.")
    higher = bool(old.summary.get("higher_is_better", True))
    a, b = old.tables["prune"], new.tables["prune"]
    noise = Noise(old, new)
    for metric in a["metric"].unique():
        pa = a[a["metric"] == metric].set_index("removed")
        pb = b[b["metric"] == metric].set_index("removed")
        if pb.empty:
            raise RunError(f"the new prune run has no metric '{metric}': compare runs of the same task and settings.")
        same_keys(pa.index, pb.index, f"prune.csv ({metric})")
        base_old, base_new = float(pa["baseline"].iloc[0]), float(pb["baseline"].iloc[0])
        # scale: the baseline score, or for kl/drift (baseline 0) the largest drop the baseline run saw
        limit = tol["prune"] * max(abs(base_old), float(pa["delta"].abs().max()), 1e-12)
        worse = (base_old - base_new) if higher else (base_new - base_old)
        into.checks.append(noise.check(Check(name, f"baseline {metric}", "unpruned", base_old, base_new,
                                             base_new - base_old, limit, outside(base_old, base_new, max(worse, 0.0),
                                                                                 limit)), metric, None, worse))
        for removed, row in pa.iterrows():
            other = float(pb.loc[removed, "delta"])
            delta = other - float(row["delta"])
            into.checks.append(noise.check(Check(name, f"dP {metric}", f"layer {removed}", float(row["delta"]), other,
                                                 delta, limit, outside(float(row["delta"]), other, delta, limit)),
                                           metric, str(removed)))
        column_checks(into, name, "prune.csv", (pa, pb), str(metric), lambda removed: f"layer {removed}",
                      tol["prune"], done=("baseline", "delta"))
    into.notes += noise.detectable(name)
    into.untested += noise.untested
