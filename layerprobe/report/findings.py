"""Plain-language findings computed from a run's numbers (no claims the numbers do not carry)."""

from __future__ import annotations

from typing import Any

from layerprobe.evaluation.metric import has_baseline
from layerprobe.metrics.stats import spearman_interval
from layerprobe.runs.read import Run

REMOVABLE = 0.2  # d(l, 1) below this: the block changes its input by less than 0.2 * pi radians (36 degrees)


def spans(layers: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    parts, start = [], None
    for i, layer in enumerate(layers):
        if start is None:
            start = layer
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            parts.append(f"{start}-{layer}" if layer != start else f"{layer}")
            start = None
    return ", ".join(parts)


def signed(value: float) -> str:
    """A change with its sign, 3 significant digits; no change is '0', not '+0'."""
    return "0" if value == 0 else f"{value:+.3g}"


def findings(run: Run) -> list[str]:
    """Sentences about the run, from its numbers (each command's own function, named in runs/kinds.py)."""
    return run.kind.function("findings")(run)


def _halves(values: list[float]) -> tuple[float, float]:
    half = max(1, len(values) // 2)
    return sum(values[:half]) / half, sum(values[-half:]) / half


def _where(layers: list[int], chosen: list[int], what: str, verb: str = "sit") -> str:
    """Where `chosen` layers sit in depth, as relative depth l / (L - 1) and the third of the stack."""
    depth = max(1, max(layers))
    relative = [layer / depth for layer in chosen]
    thirds = sorted({("first", "middle", "last")[min(2, int(3 * r))] for r in relative},
                    key=("first", "middle", "last").index)
    return (f"{what} {verb} at relative depth {', '.join(f'{r:.2f}' for r in relative)} (0 = first block, 1 = last): "
            f"the {' and '.join(thirds)} third{'s' if len(thirds) > 1 else ''} of the stack.")


PLACEMENT_WORDS = {"pre": "Pre-LN (a norm before each sub-layer)", "post": "Post-LN (the residual sum normalized)",
                   "peri": "Peri-LN (norms before and after each sub-layer, the residual left unnormalized)",
                   "mix": "Mix-LN (Post-LN blocks first, then Pre-LN)", "unknown": "not recognized"}


def angular_findings(run: Run) -> list[str]:
    table = run.tables["angular"]
    one = table[table["n"] == 1].sort_values("layer")
    layers, values = one["layer"].tolist(), one["distance"].tolist()
    out = []
    small = [layer for layer, d in zip(layers, values) if d < REMOVABLE]
    if small and len(small) <= len(layers) // 4:
        which = f"Layers {spans(small)} each change" if len(small) > 1 else f"Layer {small[0]} changes"
        out.append(f"{which} the representation by less than {REMOVABLE} (angular distance d(l, 1)): "
                   f"candidate{'s' if len(small) > 1 else ''} for removal.")
    elif small:  # most of the stack under the line: the line no longer tells layers apart
        out.append(f"{len(small)} of {len(layers)} layers change the representation by less than {REMOVABLE} (angular "
                   "distance d(l, 1)): too many to remove together, so the threshold does not pick layers here; the "
                   "ranking below does, and a prune sweep measures what each costs.")
    order = sorted(zip(values, layers))
    out.append("Least change: " + ", ".join(f"layer {layer} ({d:.3f})" for d, layer in order[:3])
               + "; most change: " + ", ".join(f"layer {layer} ({d:.3f})" for d, layer in order[::-1][:3]) + ".")
    out.append(_where(layers, [layer for _, layer in order[:3]], "The three layers that change the representation "
                      "least"))
    if run.summary.get("placement"):
        out.append(f"Normalization read from the blocks: {PLACEMENT_WORDS.get(run.summary['placement'], 'unknown')}.")
    early, late = _halves(values)
    if late < 0.8 * early:
        out.append(f"Deep layers change the representation less than early ones (mean d(l, 1) {late:.3f} in the "
                   f"second half vs {early:.3f} in the first): the Pre-LN signature.")
    elif early < 0.8 * late:
        out.append(f"Early layers change the representation less than deep ones (mean d(l, 1) {early:.3f} in the "
                   f"first half vs {late:.3f} in the second): the Post-LN signature.")
    else:
        out.append(f"Change is spread evenly over depth (mean d(l, 1) {early:.3f} first half, {late:.3f} second).")
    kinds = run.tables.get("layers")
    if kinds is not None and "layer_type" in kinds and kinds["layer_type"].dropna().nunique() > 1:
        by_kind = one.merge(kinds[["layer", "layer_type"]], on="layer")
        medians = by_kind.groupby("layer_type")["distance"].median().sort_values()
        out.append("By kind of layer, median d(l, 1): " + ", ".join(
            f"{kind.replace('_', ' ')} {d:.3f} ({int((by_kind['layer_type'] == kind).sum())} layers)"
            for kind, d in medians.items()) + f"; the {medians.index[0].replace('_', ' ')} layers change the "
            "representation least.")
    quarter = max(1, len(layers) // 4)
    best = next((b for b in run.summary.get("prune_first", []) if b.get("n") == quarter), None)
    if best and quarter > 1:
        out.append(f"Best block of {quarter} consecutive layers to remove (Gromov et al.): layers {best['layers']}, "
                   f"d(l, {quarter}) = {best['distance']:.3f}.")
    return out


def ranked(main: Any, higher: bool) -> Any:
    """The variants of one metric from cheapest to costliest removal (cost: how much worse the score gets), ties
    broken by layer: the one order every finding and the conflicts read."""
    cost = -main["delta"] if higher else main["delta"]
    return main.assign(cost=cost.to_numpy()).sort_values(["cost", "layer"], kind="mergesort")


def has_intervals(main: Any) -> bool:
    """The table carries paired intervals (per-document records) for at least one variant."""
    return "delta_lo" in main and main["delta_lo"].notna().any()


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
    rule = (f"the paired 95% interval excludes 0 and the change survives Holm's correction over the {n} "
            f"removals")
    out = []
    if worse.empty and better.empty:
        known = int(order["delta_lo"].notna().sum())
        out.append(f"No removal changes {s['metric']} measurably: none of the {known} removals with an interval "
                   f"passes ({rule}). Its ranking is noise at this many documents; score more for a finer answer.")
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
        out.append(_where(sorted(int(x) for x in main["layer"]), [int(x) for x in worse["layer"].head(3)],
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
    return [text + "."]


def _point_ranking(main: Any, higher: bool, s: dict) -> list[str]:
    """A run without intervals: the ranking by point estimate, said to be one, or nothing where it is noise."""
    order = ranked(main, higher)
    stderr = main["baseline_stderr"].dropna() if "baseline_stderr" in main else []
    if s.get("records") and not has_intervals(main):
        return [f"Too few documents for an interval of any dP ({s['metric']}): no removal can be told from noise, "
                "so none is ranked; score more documents."]
    if len(stderr) and float(order["cost"].abs().max()) <= 2 * float(stderr.iloc[0]):
        return [f"Every |dP| is within twice the baseline's standard error ({2 * float(stderr.iloc[0]):.3g}): no "
                "removal can be told from noise, so none is ranked."]
    if order["cost"].iloc[0] == order["cost"].iloc[-1]:
        return [f"Every removal gives the same {s['metric']}: none is cheaper or costlier than another."]
    k = min(3, len(order) // 2)  # never the same layer in both lists, nor a tie with the other end in either
    cheap = order.head(k)[order.head(k)["cost"] < order["cost"].iloc[-1]]
    costly = order.tail(k)[order.tail(k)["cost"] > order["cost"].iloc[0]][::-1]
    out = ["Cheapest to remove, by point estimate (this run has no per-document records, so no interval): "
           + ", ".join(f"{r.removed} (dP {signed(r.delta)})" for r in cheap.itertuples())
           + "; costliest: " + ", ".join(f"{r.removed} (dP {signed(r.delta)})" for r in costly.itertuples())
           + "."]
    if s.get("block", 1) == 1 and len(main) >= 3:
        out.append(_where(sorted(int(x) for x in main["layer"]), [int(x) for x in order.head(3)["layer"]],
                          "The three layers cheapest to remove"))
    return out


def prune_findings(run: Run) -> list[str]:
    s = run.summary
    table = run.tables["prune"]
    main = table[table["metric"] == s["metric"]]
    higher = s.get("higher_is_better", True)
    out = [] if not has_baseline(s["metric"]) else [f"Unpruned {s['metric']} = {s['baseline']:.4g}."]
    chance = at_chance(s, main)
    if chance is not None:
        out.append(f"The unpruned model scores at chance ({s['metric']} {s['baseline']:.3g}, chance {chance:g}): "
                   "removing a layer cannot lower what it does not know, so the ranking below is noise; use a task "
                   "the model can do, or more documents.")
    out += _measured(main, higher, s) if has_intervals(main) else _point_ranking(main, higher, s)
    if "layer_type" in main and main["layer_type"].nunique() > 1 and s.get("block", 1) == 1:
        out.append(_by_kind(main, ranked(main, higher), higher))
    out += _correlations(s, len(main), higher)
    return out


def _correlations(s: dict, n: int, higher: bool) -> list[str]:
    """How well d(l, 1) and the other cheap signals predict the measured cost, each with its interval: a signal is
    called the one to trust only where its interval excludes 0 on the predicting side."""
    out = []
    rho = s.get("spearman_angular_delta")
    if rho is not None:
        strength = "strongly" if abs(rho) >= 0.7 else "moderately" if abs(rho) >= 0.4 else "weakly"
        expected = rho < 0 if higher else rho > 0  # bigger change -> bigger loss when removed
        how = ("layers that change the representation more cost more to remove" if expected
               else "the opposite of the usual reading: layers that change the representation more cost less to remove")
        interval = spearman_interval(rho, n)
        if interval is None:
            out.append(f"Spearman(d(l, 1), dP) = {rho:+.2f} over only {n} layers: too few layers to tell.")
        else:
            low, high = interval
            sure = "" if low > 0 or high < 0 else "; the interval includes 0, so this could be chance"
            out.append(f"The angular distance d(l, 1) {strength} predicts the pruning cost (Spearman {rho:+.2f}, 95% "
                       f"interval {low:+.2f} to {high:+.2f} over {n} layers{sure}): {how}.")
    signals = s.get("spearman_delta") or {}
    if len(signals) > 1:
        sign = -1 if higher else 1  # rho with the cost of removing the layer, not with dP
        names = {"angular": "d(l, 1)", "block_influence": "Block Influence", "logit_lens_kl": "logit-lens KL"}
        ranked_signals = sorted(signals.items(), key=lambda item: -sign * item[1])
        best, best_rho = ranked_signals[0]
        listed = ", ".join(f"{names.get(k, k)} {sign * v:+.2f}" for k, v in ranked_signals)
        head = f"Cheap signals against the measured cost (Spearman with the cost of removal): {listed}; "
        interval = spearman_interval(sign * best_rho, n)
        if interval is None:
            out.append(head + f"too few layers ({n}) to tell which to trust.")
        elif sign * best_rho >= 0.4 and interval[0] > 0:
            out.append(head + f"the one to trust for this model is {names.get(best, best)} (95% interval "
                       f"{interval[0]:+.2f} to {interval[1]:+.2f}).")
        else:
            out.append(head + "none predicts it well here (below 0.4, or an interval that includes 0): measure "
                       "with prune.")
    return out


# Chance accuracy of multiple-choice tasks whose choices are fixed (curves draw it; findings warn at it)
CHANCE = {"mmlu": 0.25, "arc_easy": 0.25, "arc_challenge": 0.25, "hellaswag": 0.25, "openbookqa": 0.25,
          "piqa": 0.5, "winogrande": 0.5, "boolq": 0.5}


def chance_of(task: str, metric: str) -> float | None:
    """The chance accuracy of a task's accuracy metric (an MMLU subject or group counts as mmlu), else None."""
    if not str(metric).startswith("acc"):
        return None
    return CHANCE.get("mmlu" if str(task).startswith("mmlu") else str(task))


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


def curve_findings(run: Run) -> list[str]:
    s = run.summary
    layers = s.get("num_layers")
    tolerance = (f"{s['metric']} at least {s['keep']:g} of the unpruned {s['baseline']:.4g}" if s.get("higher_is_better")
                 else f"{s['metric']} within the tolerance of keep = {s['keep']:g}")
    if s.get("keep_by") == "bound":
        tolerance += " (even at the worse end of its paired 95% interval)"
    out = []
    table = run.tables.get("curve")
    for strategy, verdict in s.get("curve", {}).items():
        k = verdict["max_k"]
        if k:
            out.append(f"{strategy}: {k} of {layers} layers ({k / layers:.0%}) can go with {tolerance} "
                       f"(remove {verdict['removed']}, {s['metric']} {verdict['score']:.4g}{_point(table, strategy, k)}).")
        else:
            out.append(f"{strategy}: no layer can go with {tolerance}.")
    out += _healed(run)
    best = max(s.get("curve", {}).items(), key=lambda item: item[1]["max_k"], default=None)
    if best and best[1]["max_k"]:
        out.append(f"Best strategy here: {best[0]}; export it with `layerprobe export {run.model} --from-curve "
                   f"{run.folder} --strategy {best[0]} --k {best[1]['max_k']}`.")
    return out


def _point(table: Any, strategy: str, k: int) -> str:
    """', dP ... with its paired interval, and whether the change is measurable' for one point of a curve."""
    if table is None or "delta_lo" not in table:
        return ""
    row = table[(table["strategy"] == strategy) & (table["k"] == k)]
    if row.empty or row["delta_lo"].isna().iloc[0]:
        return ""
    row = row.iloc[0]
    measured = "a measurable change" if bool(row["significant"]) else "not measurably different from the unpruned"
    return f"; dP {signed(row['delta'])}, 95% interval {row['delta_lo']:+.3g} to {row['delta_hi']:+.3g}: {measured}"


def _healed(run: Run) -> list[str]:
    """--heal-steps: each strategy's largest set after healing, against the unpruned model healed alike."""
    s, table = run.summary, run.tables.get("curve")
    reference = s.get("healed_baseline")
    method = s.get("heal") or ("lora" if s.get("heal_steps") else None)
    if not method or reference is None or table is None or "healed_score" not in table:
        return []
    how = f"{s['heal_steps']} {'LoRA' if method == 'lora' else 'tail'} steps" if s.get("heal_steps") else method
    alike = "unpruned model healed alike" if s.get("heal_steps") else "unpruned model"
    out = []
    for strategy, rows in table.groupby("strategy", sort=False):
        last = rows.sort_values("k").iloc[-1]
        text = (f"{strategy} healed ({how}): without {int(last['k'])} layers {s['metric']} "
                f"{last['score']:.4g} -> {last['healed_score']:.4g}, against {reference:.4g} for the {alike}")
        out.append(text + _healed_intervals(last) + ".")
    return out


def _healed_intervals(row: Any) -> str:
    """What the paired intervals over the probe sequences say of a healed point (curve.csv's healed columns)."""
    if "heal_change_lo" not in row or row["heal_change_lo"] != row["heal_change_lo"]:
        return ""

    def said(lo: float, hi: float) -> str:
        return "0 inside it" if lo <= 0 <= hi else "excludes 0"
    return (f" (paired 95% intervals over the probe sequences: the repair's change {row['heal_change_lo']:+.3g} to "
            f"{row['heal_change_hi']:+.3g}, {said(row['heal_change_lo'], row['heal_change_hi'])}; healed minus the "
            f"reference {row['healed_delta_lo']:+.3g} to {row['healed_delta_hi']:+.3g}, "
            f"{said(row['healed_delta_lo'], row['healed_delta_hi'])})")


def costliest(prune: Run, k: int) -> list[int]:
    """The layers among the k costliest removals of a one-layer sweep that a finding may call costly: with paired
    intervals, only those measurably worse; without, only those whose cost is above 0 and above the cheapest's (a
    tie with the cheapest removal is never costly)."""
    table = prune.tables["prune"]
    main = table[table["metric"] == prune.summary["metric"]]
    order = ranked(main, prune.summary.get("higher_is_better", True))
    top = order.tail(k)
    if has_intervals(main):
        top = top[top["significant"].astype(bool) & (top["cost"] > 0)]
    else:
        top = top[(top["cost"] > 0) & (top["cost"] > order["cost"].iloc[0])]
    return [int(x) for x in top["layer"]]


def conflicts(runs: list[Run]) -> list[str]:
    """Where two signals about one model disagree: a layer the angular distance calls cheap (among its k smallest
    d(l, 1)) that a pruning sweep of the same model finds among its k costliest to remove, measurably (k = 3, or half
    the layers of a small model, so that the two lists can be disjoint)."""
    out = []
    for angular in (r for r in runs if r.command == "angular"):
        one = angular.tables["angular"]
        one = one[one["n"] == 1].sort_values(["distance", "layer"], kind="mergesort")
        k = min(3, len(one) // 2)
        rank = {int(layer): i + 1 for i, layer in enumerate(one["layer"])}
        distance = {int(r.layer): float(r.distance) for r in one.itertuples()}
        for prune in (r for r in runs if r.command == "prune" and r.summary.get("model") == angular.summary.get("model")):
            if prune.summary.get("block", 1) != 1:
                continue
            both = sorted(layer for layer in costliest(prune, k) if rank.get(layer, k + 1) <= k)
            if both:
                named = ", ".join(f"layer {layer} (d(l, 1) = {distance[layer]:.3f}, rank {rank[layer]} of "
                                  f"{len(rank)})" for layer in both)
                are, these = ("are", "these layers do") if len(both) > 1 else ("is", "this layer does")
                main = prune.tables["prune"]
                how = "measurably worse" if has_intervals(main[main["metric"] == prune.summary["metric"]]) else \
                    "by point estimate"
                out.append(f"{angular.model}: {named} {are} among the {k} layers that change the representation "
                           f"least (angular) yet among the {k} costliest to remove, {how} "
                           f"({prune.summary.get('task')}): trust the measured cost; the angular distance misses "
                           f"what {these}.")
    return out


def gradnorm_findings(run: Run) -> list[str]:
    out = []
    for norm, info in run.summary.get("placements", {}).items():
        ratio = info.get("params_late_over_early")
        if ratio is None:
            continue
        if ratio < 0.5:
            verdict = "gradients shrink with depth, the Pre-LN pattern: deep layers get little of the update"
        elif ratio > 2:
            verdict = "gradients grow with depth: early layers get the smaller share"
        else:
            verdict = "gradients are balanced across depth"
        line = f"{norm}: the last third of layers has {ratio:.2g}x the parameter gradient norm of the first third ({verdict})."
        var = info.get("variance_late_over_early")
        if var is not None:
            line += f" Output variance, deep over early: {var:.2g}x."
        out.append(line)
    for norm, info in run.summary.get("training", {}).items():
        where = (f"from step {info['crossover_step']} on" if info.get("crossover_step") is not None
                 else "not below at the end")
        out.append(f"{norm} while training: the deep third's mean d(l, 1) ends at {info['deep_distance']:.3f} against "
                   f"the shallow third's {info['shallow_distance']:.3f} (deep below shallow: {where}; training.png).")
    return out


def monitor_findings(run: Run) -> list[str]:
    """When the deep layers' d(l, 1) fell below the shallow ones', and the depth profile at the last step."""
    s, last = run.summary, run.summary.get("last", {})
    steps = s.get("steps", [])
    out = [f"Measured at {len(steps)} steps ({steps[0] if steps else '?'} to {steps[-1] if steps else '?'}), every "
           f"{s.get('every')} on {s.get('tokens')} probe positions."]
    shallow, deep = last.get("shallow_distance"), last.get("deep_distance")
    if shallow is not None and deep is not None:
        where = (f"from step {s['crossover_step']} on" if s.get("crossover_step") is not None
                 else "not below at the last step")
        out.append(f"At step {last.get('step')} the deep third's mean d(l, 1) is {deep:.3f} against the shallow "
                   f"third's {shallow:.3f} (deep below shallow: {where}).")
    ratio = last.get("grad_late_over_early")
    if ratio is not None:
        out.append(f"The last third of blocks has {ratio:.2g}x the gradient norm of the first third at that step.")
    return out


def toy_findings(run: Run) -> list[str]:
    out = []
    for norm, by_alpha in run.summary.get("fits", {}).items():
        for key, fit in by_alpha.items():
            norm_fit, cos_fit = fit.get("hidden_norm"), fit.get("one_minus_cos_next")
            if norm_fit and cos_fit:
                out.append(f"{norm} ({key}): over the deep half ||h_l|| ~ l^{norm_fit['slope']:.2f} and "
                           f"1 - cos(h_l, h_l+1) ~ l^{cos_fit['slope']:.2f} (Pre-LN random walk: l^0.5 and l^-1).")
    return out


def heal_findings(run: Run) -> list[str]:
    s = run.summary
    before, after, unpruned = s["heldout_before"], s["heldout_after"], s.get("heldout_unpruned_ppl")
    won = ""
    if unpruned is not None and before["ppl"] > unpruned:  # the share of the removal's ppl cost won back
        share = (before["ppl"] - after["ppl"]) / (before["ppl"] - unpruned)
        won = f" (the unpruned model's: {unpruned:.4g}; {share:.0%} of the removal's cost won back)"
    method = s.get("method", "lora")
    if method == "lora":
        how = f"{s['objective']}, {s['steps']} steps, LoRA rank {s['lora_rank']}"
    elif method == "tail":
        how = f"{s['objective']}, {s['steps']} steps of the LM head and the last {s.get('tail_blocks')} blocks"
    else:
        how = f"{method} replacement, no training, fitted on {s.get('train_tokens')} tokens"
    return [f"Healing the model without {s['removed']} ({how}) moved the held-out ppl from {before['ppl']:.4g} to {after['ppl']:.4g}{won} and the kl "
            f"to the unpruned model from {before['kl']:.4g} to {after['kl']:.4g}."]


def describe(run: Run) -> list[tuple[str, Any]]:
    """(label, value) facts for the run's header: the common ones and the command's own (runs/kinds.py)."""
    s, m = run.summary, run.manifest
    facts = [("command", run.command), ("model", s.get("model")), ("layers", s.get("num_layers"))]
    for label, key in run.kind.facts:
        if "{" in key:
            facts.append((label, key.format_map(s) if all(f in s for f in _fields(key)) else None))
        else:
            facts.append((label, s.get(key)))
    facts += [("device / dtype", f"{s.get('device')} / {s.get('dtype')}"), ("seconds", s.get("seconds")),
              ("started", m.get("started")), ("layerprobe", m.get("layerprobe_version"))]
    return [(k, v) for k, v in facts if v is not None]


def _fields(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]
