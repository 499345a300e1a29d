"""How report and compare read a gradnorm run (the record's Kind names these): its findings (late-over-early
gradient and variance ratios per placement), its per-layer table and its comparer."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.compare import Comparison, relative, same_keys
from layerprobe.runs.read import Run


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


def gradnorm_table(run: Run) -> Any:
    table = run.tables["gradnorm"]
    if "step" in table:
        table = table[table["step"] == table["step"].min()]
    params = table[(table["kind"] == "params") & (table["module"] == "block")]
    order = list(dict.fromkeys(params["norm"]))  # as in the plot's legend
    wide = params.pivot(index="layer", columns="norm", values="grad_norm")[order].reset_index()
    return wide.rename(columns={norm: f"{norm}: param grad norm" for norm in order})


def compare_gradnorm(old: Run, new: Run, tol: dict, into: Comparison, name: str) -> None:
    keys = ["norm", "step", "layer", "kind", "module"]
    # runs from before --steps existed have no step column: they are step 0 (the loaded tables stay as read)
    a, b = (t if "step" in t else t.assign(step=0) for t in (old.tables["gradnorm"], new.tables["gradnorm"]))
    a = a[a["module"] == "block"].set_index(keys)["grad_norm"]
    b = b[b["module"] == "block"].set_index(keys)["grad_norm"]
    same_keys(a.index, b.index, "gradnorm.csv (placements, steps, layers)")
    into.covered[(name, "gradnorm.csv")] = ("grad_norm",)  # the rest, its other tables: compare_columns.py
    into.covered[(name, "variance.csv")] = ("variance",)
    for (norm, step, layer, kind, _), value in a.items():
        relative(into, name, f"grad {kind}", f"{norm} step {step} layer {layer}", float(value),
                 float(b[(norm, step, layer, kind, "block")]), tol["gradnorm"])
    if "variance" in old.tables and "variance" in new.tables:
        va = old.tables["variance"].set_index(["norm", "step", "layer"])["variance"]
        vb = new.tables["variance"].set_index(["norm", "step", "layer"])["variance"]
        same_keys(va.index, vb.index, "variance.csv")
        for (norm, step, layer), value in va.items():
            relative(into, name, "variance", f"{norm} step {step} layer {layer}", float(value),
                     float(vb[(norm, step, layer)]), tol["variance"])
