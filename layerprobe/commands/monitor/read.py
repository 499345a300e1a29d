"""How report and compare read a monitor run (the record's Kind names these): its findings, its per-layer table (the
last measured step) and its comparer."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.columns import MONITOR
from layerprobe.runs.compare import Check, Comparison, outside, relative, same_keys
from layerprobe.runs.read import Run


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


def monitor_table(run: Run) -> Any:
    """The last measured step's row per layer, labelled as its record's columns are (runs/columns.py MONITOR)."""
    table = run.tables["monitor"]
    last = table[table["step"] == table["step"].max()]
    shown = [c for c in MONITOR if c.label != "" and c.name in last]
    return last[[c.name for c in shown]].rename(columns={c.name: c.label for c in shown if c.label})


def compare_monitor(old: Run, new: Run, tol: dict, into: Comparison, name: str) -> None:
    """d(l, 1) at each (step, layer) within the angular tolerance; each block's gradient norm, where both runs have
    one, within the gradnorm tolerance (relative); the deep-below-shallow step is noted where it moved."""
    a, b = (t.tables["monitor"].set_index(["step", "layer"]) for t in (old, new))
    same_keys(a.index, b.index, "monitor.csv (steps, layers)")
    into.covered[(name, "monitor.csv")] = ("distance_next", "grad_norm")  # the rest: compare_columns.py
    for (step, layer), row in a[a["distance_next"].notna()].iterrows():
        value, other = float(row["distance_next"]), float(b.loc[(step, layer), "distance_next"])
        into.checks.append(Check(name, "monitor d(l,1)", f"step {step} layer {layer}", value, other, other - value,
                                 tol["angular"], outside(value, other, other - value, tol["angular"])))
    for (step, layer), row in a[a["grad_norm"].notna()].iterrows():
        relative(into, name, "monitor grad", f"step {step} layer {layer}", float(row["grad_norm"]),
                 float(b.loc[(step, layer), "grad_norm"]), tol["gradnorm"])
    before, after = old.summary.get("crossover_step"), new.summary.get("crossover_step")
    if before != after:
        into.notes.append(f"{name + ': ' if name else ''}deep d(l,1) below shallow from step {before} -> {after}")
