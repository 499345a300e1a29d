"""How report and compare read a curve run (prune --curve; the record's CURVE_KIND names these): its findings, its
table of scores by k and strategy, and its comparer."""

from __future__ import annotations

from typing import Any

from layerprobe.commands.prune.read import Noise
from layerprobe.errors import RunError
from layerprobe.report.findings import signed
from layerprobe.runs.compare import Check, Comparison, outside, same_keys
from layerprobe.runs.read import Run


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


def curve_table(run: Run) -> Any:
    """k (and the fraction removed) by strategy: the score of the model without those layers."""
    curve = run.tables["curve"]
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
    limit = tol["prune"] * max(abs(float(a["baseline"].iloc[0])), float(a["delta"].abs().max()), 1e-12)
    noise = Noise(old, new)
    for (strategy, k), row in a.iterrows():
        other = b.loc[(strategy, k)]
        delta = float(other["score"]) - float(row["score"])
        check = Check(name, f"curve {row['metric']}", f"{strategy} k={k}", float(row["score"]), float(other["score"]),
                      delta, limit, outside(float(row["score"]), float(other["score"]), delta, limit))
        if str(row["removed"]) == str(other["removed"]):  # the same layers: their documents' scores pair up
            check = noise.check(check, str(row["metric"]), str(row["removed"]), score_only=True)
        into.checks.append(check)
        if str(row["removed"]) != str(other["removed"]):
            into.notes.append(f"'{name}': {strategy} k={k} removes {other['removed']} (was {row['removed']})")
        for column in HEALED_NUMBERS:  # a healed curve's numbers too: never left unread
            if column in a.columns or column in b.columns:
                into.checks.append(_healed_check(name, row, other, column, strategy, k, limit))


HEALED_NUMBERS = ("healed_score", "healed_delta", "heal_change")  # curve.csv's numbers after --heal


def _healed_check(name: str, row: Any, other: Any, column: str, strategy: str, k: Any, limit: float) -> Check:
    """One healed number of a (strategy, k) within the curve's limit; present in one run only, or NaN in one, fails."""
    import math

    old, new = float(row.get(column, math.nan)), float(other.get(column, math.nan))
    if math.isnan(old) and math.isnan(new):
        return Check(name, f"curve {row['metric']} {column}", f"{strategy} k={k}", old, new, 0.0, limit, False)
    delta = new - old
    return Check(name, f"curve {row['metric']} {column}", f"{strategy} k={k}", old, new, delta, limit,
                 math.isnan(delta) or outside(old, new, delta, limit))
