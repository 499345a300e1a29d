"""How report and compare read a curve run (prune --curve; the record's CURVE_KIND names these): its findings, its
table of scores by k and strategy, and its comparer."""

from __future__ import annotations

from typing import Any

from layerprobe.commands.prune.read import Noise
from layerprobe.errors import RunError
from layerprobe.metrics.decisions import ONE_SIDED
from layerprobe.report.findings import chance_lines, detectable_lines, predates_records, signed
from layerprobe.runs.compare import Check, Comparison, column_checks, outside, same_keys
from layerprobe.runs.read import Run


def whole_curves(run: Run) -> Any:
    """curve.csv, with a row for every strategy summary.json lists and none of another (a file cut at a row boundary
    loses a whole curve and still reads as a table; an edited strategy name reads as another curve): the damage is
    named, file, row and column, never drawn without it or read as a strategy the run did not measure. The curve
    record's check (load_run calls it for every reader)."""
    curve = run.tables["curve"]
    listed = run.summary.get("strategies")
    if isinstance(listed, list) and listed:
        unknown = ~curve["strategy"].isin(listed)
        if unknown.any():
            row = int(unknown.to_numpy().nonzero()[0][0]) + 1
            raise RunError(f"'{run.folder / 'curve.csv'}' row {row}, column strategy: "
                           f"{str(curve['strategy'].iloc[row - 1])[:30]!r} is none of the strategies summary.json "
                           f"lists ({', '.join(map(str, listed))}): re-run the command, or restore the file.")
    missing = [s for s in listed or () if s not in set(curve["strategy"])]
    if missing:
        raise RunError(f"'{run.folder / 'curve.csv'}' has no rows of the {', '.join(missing)} curve(s) summary.json "
                       "lists: re-run the command, or restore the file.")
    return curve


def curve_findings(run: Run) -> list[str]:
    whole_curves(run)
    s = run.summary
    layers = s.get("num_layers")
    tolerance = (f"{s['metric']} at least {s['keep']:g} of the unpruned {s['baseline']:.4g}" if s.get("higher_is_better")
                 else f"{s['metric']} within the tolerance of keep = {s['keep']:g}")
    bound = s.get("keep_by") == "bound"
    if bound:
        level = s.get("keep_level") or ONE_SIDED
        tolerance += f" even at the worse end of its paired 95% interval (non-inferiority, one-sided {level:.1%})"
    table = run.tables.get("curve")
    out = predates_records(s, table) + detectable_lines(s) + chance_lines(s)
    few = too_few(s, bound)
    if few:
        out.append(few)
    for strategy, verdict in s.get("curve", {}).items():
        k = verdict["max_k"]
        label = "" if bound else "exploratory, by point estimate: "
        if few and bound:  # no interval to judge by: no claim that rests on one
            out.append(f"{strategy}: no k is judged (too few documents for its interval); the table's points rank "
                       "the k only.")
        elif k:
            out.append(f"{strategy}: {label}{k} of {layers} layers ({k / layers:.0%}) can go with {tolerance} "
                       f"(remove {verdict['removed']}, {s['metric']} {verdict['score']:.4g}{_point(table, strategy, k)})"
                       f"{_needed(verdict, s)}.")
        else:
            out.append(f"{strategy}: {label}no layer can go with {tolerance}{_needed(verdict, s)}.")
    out += _healed(run)
    out += _best(run)
    return out


def too_few(s: dict, bound: bool) -> str | None:
    n, least = s.get("documents"), s.get("min_documents") or 0
    if n is None or not s.get("records") or n >= least:
        return None
    return (f"Too few documents to test ({n}, fewer than {least}): no k is judged at its bound and no strategy "
            "is compared; the points are a ranking only." if bound else
            f"Too few documents to test ({n}, fewer than {least}): the points are a ranking only.")


def _needed(verdict: dict, s: dict) -> str:
    """Where the bound stopped short of a point that passes: what that k would need."""
    if "next_k" not in verdict:
        return ""
    k, needed = verdict["next_k"], verdict.get("next_needed")
    documents = s.get("documents")
    if documents is not None and documents < (s.get("min_documents") or 0):
        return ""  # too few to test: said once, and a normal-theory count from 1 or 2 documents means nothing
    if needed is None:
        return f"; k = {k} is within by its point, with no spread to say what its bound would need"
    if documents is not None and needed <= documents:  # the count is a large-sample one; t needs more than z
        return f"; k = {k} is within by its point, and its bound would need more than the {documents:,} scored"
    return (f"; k = {k} is within by its point, and its bound would need about {needed:,} documents (against "
            f"{documents:,} scored) if its change and spread held")


def _best(run: Run) -> list[str]:
    """'Best strategy' only where a paired test says so."""
    s = run.summary
    found = s.get("curve", {})
    test = s.get("strategy_test")
    if len(found) < 2:
        return []
    if test is None or s.get("documents", 0) < (s.get("min_documents") or 0):
        if "strategy_test" in s or not found:
            return ["No strategy is tested against another (no per-document records, or too few documents): "
                    "which is best is not known."]
        most = max(v["max_k"] for v in found.values())  # a run from before the tests: say what it is
        best = [name for name, v in found.items() if v["max_k"] == most]
        if not most:
            return []
        return [f"Most layers within the tolerance (untested, by point estimate): {best[0]}." if len(best) == 1 else
                f"Most layers within the tolerance (untested, by point estimate): {', '.join(best)} tie at {most}, "
                "none can be ordered."]
    candidate = test["candidate"]
    pairs = "; ".join(_pair(candidate, other, t) for other, t in test["against"].items())
    how = f"({test['test']})"
    if test.get("best"):
        k = found[candidate]["max_k"]
        export = (f"; export it with `layerprobe export {run.model} --from-curve {run.folder} --strategy {candidate} "
                  f"--k {k}`" if k else "")
        return [f"Best strategy here: {candidate}, measurably better than every other at some k and worse at none "
                f"{how}: {pairs}{export}."]
    return [f"No strategy is measurably better than all the others {how}: {pairs}."]


def _pair(candidate: str, other: str, t: dict) -> str:
    ks = lambda found: ", ".join(str(k) for k in found)
    if not t["compared"]:
        return f"{candidate} and {other} pick the same layers at every k"
    text = f"{candidate} vs {other} over {t['compared']} k's: "
    if t["better_at"] or t["worse_at"]:
        parts = [f"better at k = {ks(t['better_at'])}"] if t["better_at"] else []
        parts += [f"worse at k = {ks(t['worse_at'])}"] if t["worse_at"] else []
        return text + ", ".join(parts)
    p = t.get("smallest_adjusted_p")
    return text + "inside each other's noise" + (f" (smallest Holm-adjusted p {p:.2g})" if p is not None else "")


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
        few = (s.get("documents") or 0) < (s.get("min_documents") or 0)  # no verdict from too few sequences
        out.append(text + (" (too few sequences to test these changes)" if few else _healed_intervals(last)) + ".")
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


def curve_table(run: Run) -> Any:
    """k (and the fraction removed) by strategy: the score of the model without those layers."""
    curve = whole_curves(run)
    return curve.pivot(index=["k", "fraction"], columns="strategy", values="score").reset_index()


def compare_curve(old: Run, new: Run, tol: dict, into: Comparison, name: str) -> None:
    """Each (strategy, k)'s score, within the prune tolerance of the run's scale; a changed layer choice is noted."""
    for key in ("task", "metric", "part"):
        if old.summary.get(key) != new.summary.get(key):
            raise RunError(f"curve runs of different {key}s ({old.summary.get(key)} vs {new.summary.get(key)}): compare "
                           "runs of the same settings.")
    a = old.tables["curve"].set_index(["strategy", "k"])
    b = new.tables["curve"].set_index(["strategy", "k"])
    same_keys(a.index, b.index, "curve.csv (strategies, k)")
    noise = Noise(old, new)
    for (strategy, k), row in a.iterrows():
        other = b.loc[(strategy, k)]
        delta = float(other["score"]) - float(row["score"])
        # the row's own scale: a ppl of 9.8e5 at k=6 sets no limit for k=1's 27
        limit = tol["prune"] * max(abs(float(row["baseline"])), abs(float(row["delta"])), 1e-12)
        check = Check(name, f"curve {row['metric']}", f"{strategy} k={k}", float(row["score"]), float(other["score"]),
                      delta, limit, outside(float(row["score"]), float(other["score"]), delta, limit))
        if str(row["removed"]) == str(other["removed"]):  # the same layers: their documents' scores pair up
            check = noise.check(check, str(row["metric"]), str(row["removed"]), score_only=True)
        into.checks.append(check)
        if str(row["removed"]) != str(other["removed"]):
            into.notes.append(f"'{name}': {strategy} k={k} removes {other['removed']} (was {row['removed']})")
    metric = f"curve {a['metric'].iloc[0]}" if len(a) else "curve"
    column_checks(into, name, "curve.csv", (a, b), metric, lambda key: f"{key[0]} k={key[1]}", tol["prune"],
                  done=("score",), alone_fails=HEALED_NUMBERS)  # a healed curve's numbers: never unread
    into.notes += noise.detectable(name)
    into.untested += noise.untested


HEALED_NUMBERS = ("healed_score", "healed_delta", "heal_change")  # curve.csv's numbers after --heal: in one run only, a
# failure (the runs repaired differently)
