"""Plain-language findings computed from a run's numbers (no claims the numbers do not carry).

Each command's own findings live in its package (commands/<name>/read.py, named by its Kind); `findings(run)` calls
them. Here: what several commands' findings share (spans, signed, where_in_depth, ranked, has_intervals, chance_of),
the conflicts between an angular and a prune run of one model, and the facts of a run's header (describe)."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.read import Run


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


def where_in_depth(layers: list[int], chosen: list[int], what: str, verb: str = "sit") -> str:
    """Where `chosen` layers sit in depth, as relative depth l / (L - 1) and the third of the stack."""
    depth = max(1, max(layers))
    relative = [layer / depth for layer in chosen]
    thirds = sorted({("first", "middle", "last")[min(2, int(3 * r))] for r in relative},
                    key=("first", "middle", "last").index)
    return (f"{what} {verb} at relative depth {', '.join(f'{r:.2f}' for r in relative)} (0 = first block, 1 = last): "
            f"the {' and '.join(thirds)} third{'s' if len(thirds) > 1 else ''} of the stack.")


def ranked(main: Any, higher: bool) -> Any:
    """The variants of one metric from cheapest to costliest removal (cost: how much worse the score gets), ties
    broken by layer: the one order every finding and the conflicts read."""
    cost = -main["delta"] if higher else main["delta"]
    return main.assign(cost=cost.to_numpy()).sort_values(["cost", "layer"], kind="mergesort")


def ends(main: Any, higher: bool, most: int = 3) -> tuple[list[Any], list[Any]]:
    """The cheapest and the costliest removals by point estimate, as tie groups (frames of rows with one cost):
    cheapest first, costliest first. A tie is never cut: a group enters whole (a first group larger than `most` is
    still named, as a tie) or not at all, and no group is at both ends; ([], []) where every removal ties (nothing
    can be ordered) or there is one. Every ranking sentence (prune's last line, the findings, summary.json's
    least_important and most_important) reads these ends."""
    order = ranked(main, higher)
    groups = [rows for _, rows in order.groupby("cost", sort=True)]
    if len(groups) < 2:
        return [], []
    k = min(most, len(order) // 2)

    def take(levels: list[Any]) -> list[Any]:
        chosen, count = [], 0
        for rows in levels:
            if chosen and count + len(rows) > k:
                break
            chosen.append(rows)
            count += len(rows)
        return chosen

    cheap = take(groups)
    return cheap, take(groups[len(cheap):][::-1])


SHOWN = 6  # the names of a tie shown in a sentence; summary.json lists them all


def ends_text(groups: list[Any], show: Any = None) -> str:
    """Tie groups as text: '3 (dP -0.1), 4, 5 (tied, dP 0)'; show(row) the value shown after each (None: none)."""
    parts = []
    for rows in groups:
        names = ", ".join(str(r.removed) for r in rows.head(SHOWN).itertuples())
        names += f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
        value = show(next(rows.itertuples())) if show else None
        tied = "tied" if len(rows) > 1 else ""
        detail = ", ".join(x for x in (tied, value) if x)
        parts.append(f"{names} ({detail})" if detail else names)
    return ", ".join(parts)


def ranking_line(main: Any, higher: bool, metric: str, paired: bool) -> str:
    """prune's last line: the removals least and most important by point estimate (the words say so; a paired
    interval decides 'measurably different', which the line before it states), ties named as ties."""
    cheap, costly = ends(main, higher)
    if len(main) < 2:
        return "one removal scored: nothing to rank by point estimate"
    if not cheap:
        return f"every removal gives the same {metric} by point estimate: tied, none can be ordered"
    line = f"least important by point estimate: {ends_text(cheap)}"
    return line if paired else line + f"; most important by point estimate: {ends_text(costly)}"


def has_intervals(main: Any) -> bool:
    """The table carries paired intervals (per-document records) for at least one variant."""
    return "delta_lo" in main and main["delta_lo"].notna().any()


# Chance accuracy of multiple-choice tasks whose choices are fixed (curves draw it; findings warn at it)
CHANCE = {"mmlu": 0.25, "arc_easy": 0.25, "arc_challenge": 0.25, "hellaswag": 0.25, "openbookqa": 0.25,
          "piqa": 0.5, "winogrande": 0.5, "boolq": 0.5}


def chance_of(task: str, metric: str) -> float | None:
    """The chance accuracy of a task's accuracy metric (an MMLU subject or group counts as mmlu), else None."""
    if not str(metric).startswith("acc"):
        return None
    return CHANCE.get("mmlu" if str(task).startswith("mmlu") else str(task))


def detectable_lines(s: dict) -> list[str]:
    """The run's first lines: the smallest change it could see, per metric (summary.json detectable)."""
    from layerprobe.evaluation.metric import METRICS

    out = []
    few = s.get("documents") is not None and s["documents"] < (s.get("min_documents") or 0)
    for label, d in (s.get("detectable") or {}).items():
        if d.get("why"):
            out.append(f"No minimum detectable effect for {label}: {d['why']}.")
        if d.get("change") is None or d["change"] != d["change"]:
            continue
        unit = ("sequences" if str(s.get("metric")) in METRICS else
                "questions" if s.get("chance_test") or "gold loglikelihood" in s["detectable"] else "documents")
        what = "a gold-answer loglikelihood change (nats)" if label == "gold loglikelihood" else f"{article_of(label)} {label} change"
        if few:  # nothing is tested: the number sizes a test the run does not make, from an uncertain stderr
            out.append(f"With {d['documents']:,} {unit} (fewer than {s['min_documents']}) no change is tested; a test "
                       f"would miss {what} smaller than about {d['change']:.3g} (minimum detectable effect at "
                       f"{d['power']:.0%} power and 0.05 / {d['family']}, from a median paired stderr of "
                       f"{d['stderr']:.3g} that {d['documents']:,} {unit} themselves estimate poorly).")
            continue
        out.append(f"With {d['documents']:,} {unit}, {what} smaller than {d['change']:.3g} cannot be seen (minimum "
                   f"detectable effect: {d['power']:.0%} power, two-sided at {d['level']:.2g} = 0.05 / {d['family']}, "
                   f"Holm's worst step over the family of {d['family']}; median paired stderr {d['stderr']:.3g}): "
                   "\"not measurable\" below it does not mean equivalent.")
    return out


def predates_records(s: dict, table: Any) -> list[str]:
    """A prune or curve run scored before per-document records (none in summary.json, no interval in its table)
    says so before any number."""
    if s.get("records") or s.get("detectable") or (table is not None and "delta_lo" in table
                                                    and table["delta_lo"].notna().any()):
        return []
    return [PREDATES_RECORDS]


PREDATES_RECORDS = ("This run predates per-document records (samples.csv.gz): it has no paired intervals, no tests "
                    "and no minimum detectable effect, so every number below is a point estimate without an "
                    "interval; score it again for decisions.")


def article_of(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def chance_lines(s: dict, most: int = 8) -> list[str]:
    """Multiple choice: which scores an exact binomial test cannot tell from chance (summary.json chance_test)."""
    test = s.get("chance_test")
    if not test:
        return []
    base, chance, metric = test["baseline"], test["chance"], s.get("metric")
    score = base["correct"] / base["n"]
    if base["p"] > 0.05:
        return [f"The unpruned {metric} {score:.3g} ({base['correct']} of {base['n']}) cannot be told from chance "
                f"{chance:g} (exact binomial, two-sided p {base['p']:.2g}): a score not shown to be above chance has "
                f"little room to fall, so a removal's {metric} change says little about the layer; use a task the "
                "model can do, or more documents."]
    out = [f"The unpruned {metric} {score:.3g} ({base['correct']} of {base['n']}) is above chance {chance:g} "
           f"(exact binomial, two-sided p {base['p']:.2g}), by {score - chance:+.3g}."]
    flat = test.get("variants_at_chance") or []
    if flat:
        shown = ", ".join(f"{label} (p {test['p'][label]:.2g})" for label in flat[:most])
        more = f", and {len(flat) - most} more" if len(flat) > most else ""
        out.append(f"Without {shown}{more}, {metric} cannot be told from chance (exact binomial, each alone at "
                   f"0.05, {len(flat)} of {test['variants_tested']} variants).")
    return out


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


def describe(run: Run) -> list[tuple[str, Any]]:
    """(label, value) lines of the run's header: the common ones and the command's own (its Kind's header)."""
    s, m = run.summary, run.manifest
    lines = [("command", run.command), ("model", s.get("model")), ("layers", s.get("num_layers"))]
    for label, key in run.kind.header:
        if "{" in key:
            lines.append((label, key.format_map(s) if all(f in s for f in _fields(key)) else None))
        else:
            lines.append((label, s.get(key)))
    lines += [("device / dtype", f"{s.get('device')} / {s.get('dtype')}"), ("seconds", s.get("seconds")),
              ("started", m.get("started")), ("layerprobe", m.get("layerprobe_version"))]
    return [(k, v) for k, v in lines if v is not None]


def _fields(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]
