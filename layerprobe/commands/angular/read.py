"""How report and compare read an angular run (the record's Kind names these): its findings, its per-layer table,
its line of the overlay across runs, its comparer, and its heatmaps drawn again on one scale beside each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from layerprobe.errors import RunError
from layerprobe.plots.heatmap import distance_grid, heatmap_of_grid
from layerprobe.report.findings import spans, where_in_depth
from layerprobe.runs.columns import LAYERS
from layerprobe.runs.compare import Check, Comparison, outside, same_keys
from layerprobe.runs.folder import save_figure
from layerprobe.runs.read import Run


REMOVABLE = 0.2  # d(l, 1) below this: the block changes its input by less than 0.2 * pi radians (36 degrees)


def _halves(values: list[float]) -> tuple[float, float]:
    half = max(1, len(values) // 2)
    return sum(values[:half]) / half, sum(values[-half:]) / half


PLACEMENT_WORDS = {"pre": "Pre-LN (a norm before each sub-layer)", "post": "Post-LN (the residual sum normalized)",
                   "peri": "Peri-LN (norms before and after each sub-layer, the residual left unnormalized)",
                   "mix": "Mix-LN (Post-LN blocks first, then Pre-LN)", "unknown": "not recognized"}


def whole_grid(run: Run) -> None:
    """The angular record's check (load_run runs it for every reader): angular.csv holds each (l, n) of the
    summary's num_layers blocks once, l + n <= num_layers, and layers.csv each x_l, l = 0..num_layers; a row out
    of range (an edited index) or a grid cut at a row boundary is named, file and row, never drawn as it is."""
    layers = run.summary.get("num_layers")
    if not isinstance(layers, int) or isinstance(layers, bool):
        return  # the summary's own check names it (load_run, check_read_summary)
    for file, table, keys, want in (
            ("angular.csv", run.tables["angular"], ("layer", "n"),
             {(l, n) for n in range(1, layers + 1) for l in range(layers - n + 1)}),
            ("layers.csv", run.tables["layers"], ("layer",), {(l,) for l in range(layers + 1)})):
        rows = [tuple(int(v) for v in row) for row in table[list(keys)].itertuples(index=False)]
        extra = next((i for i, row in enumerate(rows, 1) if row not in want), None)
        if extra is not None:
            where = ", ".join(f"{k} {v}" for k, v in zip(keys, rows[extra - 1]))
            raise RunError(f"'{run.folder / file}' row {extra}, columns {', '.join(keys)}: {where} is outside the "
                           f"{layers} blocks summary.json records: re-run the command, or restore the file.")
        if len(rows) < len(want):
            missing = min(want - set(rows))
            named = ", ".join(f"{k} {v}" for k, v in zip(keys, missing))
            raise RunError(f"'{run.folder / file}' lacks the row of {named} ({len(rows)} of the {len(want)} rows of "
                           f"{layers} blocks): cut off by a copy or a full disk; re-run the command, or restore the "
                           "file.")


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
    out.append(where_in_depth(layers, [layer for _, layer in order[:3]],
                              "The three layers that change the representation least"))
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


def angular_table(run: Run) -> Any:
    """layers.csv as the report prints it (runs/columns.py): layer, the kind where kinds differ, the columns every
    run measures, then the optional ones this run has."""
    layers = run.tables["layers"]
    shown = [c for c in LAYERS if c.label != "" and c.name in layers]
    kinds = [c.name for c in shown if c.name == "layer_type" and layers[c.name].dropna().nunique() > 1]
    core = sorted((c.name for c in shown if not c.optional and c.name != "layer"),
                  key=lambda name: name != "distance_next")  # d(l, 1) first: what the plot shows
    extra = [c.name for c in shown if c.optional and c.name != "layer_type" and layers[c.name].notna().any()]
    labels = {c.name: c.label for c in shown if c.label}
    table = layers[["layer", *kinds, *core, *extra]].rename(columns=labels)
    # the last row is x_L, the last block's output, not a block: it has no d(l, 1) or Block Influence of its own
    last = int(table["layer"].max())
    table["layer"] = [f"{v} (output of block {v - 1})" if v == last else str(v) for v in table["layer"]]
    return table


def angular_by_depth(run: Run) -> tuple[Any, Any]:
    """(layer, d(l, 1)) for the overlay across runs."""
    t = run.tables["angular"]
    t = t[t["n"] == 1].sort_values("layer")
    return t["layer"], t["distance"]


def compare_angular(old: Run, new: Run, tol: dict, into: Comparison, name: str) -> None:
    if old.summary.get("positions") != new.summary.get("positions"):
        raise RunError(f"angular runs measured different positions ({old.summary.get('positions')} vs "
                       f"{new.summary.get('positions')}): compare runs made with the same --positions.")
    a = old.tables["angular"].set_index(["layer", "n"])["distance"]
    b = new.tables["angular"].set_index(["layer", "n"])["distance"]
    same_keys(a.index, b.index, "angular.csv")
    into.covered[(name, "angular.csv")] = ("distance",)  # its other columns and layers.csv: compare_columns.py
    for (layer, n), value in a.items():
        other = float(b[(layer, n)])
        delta = other - float(value)
        into.checks.append(Check(name, "angular d(l,n)", f"l={layer} n={n}", float(value), other, delta,
                                 tol["angular"], outside(float(value), other, delta, tol["angular"])))


def _layer_kinds(run: Run) -> list[str] | None:
    """Each block's kind from the run's layers.csv (runs before the column existed have none)."""
    layers = run.tables.get("layers")
    if layers is None or "layer_type" not in layers:
        return None
    kinds = layers["layer_type"].fillna("").astype(str).tolist()[:-1]  # the last row is the output, no block
    return kinds if all(kinds) else None


def shared_heatmaps(group: list[Run], assets: Path) -> dict[int, Path]:
    """Angular runs shown side by side get their heatmaps drawn again on one colour scale (their joint range), so
    a colour means the same distance in each; a single run keeps its own figure."""
    if len(group) < 2:
        return {}
    grids = [distance_grid(run.tables["angular"]) for run in group]
    limits = (min(float(np.nanmin(g)) for g in grids), max(float(np.nanmax(g)) for g in grids))
    paths = {}
    for index, (run, grid) in enumerate(zip(group, grids)):
        title = f"{run.model}: angular distance over {run.summary.get('tokens', 0):,} tokens"
        kinds = _layer_kinds(run)
        paths[index] = save_figure(assets / f"angular_{index}_heatmap_shared",
                                   heatmap_of_grid(grid, title, limits, kinds), ("png",))[0]
    return paths
