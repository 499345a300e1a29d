"""The per-layer numbers printed under each run's plot in the report, one function per command (runs/kinds.py)."""

from __future__ import annotations

from typing import Any

from layerprobe.metrics.paired import holm_adjusted
from layerprobe.runs.columns import LAYERS, MONITOR
from layerprobe.runs.read import Run


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


def prune_table(run: Run) -> Any:
    table = run.tables["prune"]
    main = table[table["metric"] == run.summary["metric"]]
    kinds = ["layer_type"] if "layer_type" in main and main["layer_type"].dropna().nunique() > 1 else []
    shown = main[["removed", *kinds, "baseline", "pruned", "delta"]].rename(columns={"delta": "dP", "layer_type": "kind"})
    if "delta_lo" in main and main["delta_lo"].notna().any():  # the paired interval and Holm's verdict
        # the interval is each removal's own (uncorrected); Holm's adjusted p says why one that excludes 0 can still
        # not be measurable once every removal of the sweep is tested
        adjusted = holm_adjusted(main["p_value"].tolist()) if "p_value" in main else [float("nan")] * len(main)
        shown = shown.assign(**{"95% interval (uncorrected)": [f"{lo:+.3g} to {hi:+.3g}" if lo == lo else ""
                                                               for lo, hi in zip(main["delta_lo"], main["delta_hi"])],
                                "p (Holm-adjusted)": [f"{p:.2g}" if p == p else "" for p in adjusted],
                                "measurable (Holm)": ["yes" if flag else "" for flag in main["significant"].astype(bool)]})
    return shown


def curve_table(run: Run) -> Any:
    """k (and the fraction removed) by strategy: the score of the model without those layers."""
    curve = run.tables["curve"]
    return curve.pivot(index=["k", "fraction"], columns="strategy", values="score").reset_index()


def toy_table(run: Run) -> Any:
    toy = run.tables["toy"]
    first = toy[toy["alpha"] == toy["alpha"].iloc[0]]
    return first.pivot(index="layer", columns="norm", values="hidden_norm").reset_index()


def heal_table(run: Run) -> Any:
    """The scored steps of heal.csv."""
    table = run.tables["heal"]
    return table.dropna(subset=["heldout_ppl"]).reset_index(drop=True)


def gradnorm_table(run: Run) -> Any:
    table = run.tables["gradnorm"]
    if "step" in table:
        table = table[table["step"] == table["step"].min()]
    params = table[(table["kind"] == "params") & (table["module"] == "block")]
    order = list(dict.fromkeys(params["norm"]))  # as in the plot's legend
    wide = params.pivot(index="layer", columns="norm", values="grad_norm")[order].reset_index()
    return wide.rename(columns={norm: f"{norm}: param grad norm" for norm in order})


def monitor_table(run: Run) -> Any:
    """The last measured step's row per layer, labelled as in runs/columns.py."""
    table = run.tables["monitor"]
    last = table[table["step"] == table["step"].max()]
    shown = [c for c in MONITOR if c.label != "" and c.name in last]
    return last[[c.name for c in shown]].rename(columns={c.name: c.label for c in shown if c.label})


def angular_by_depth(run: Run) -> tuple[Any, Any]:
    """(layer, d(l, 1)) for the overlay across runs."""
    t = run.tables["angular"]
    t = t[t["n"] == 1].sort_values("layer")
    return t["layer"], t["distance"]


def prune_by_depth(run: Run) -> tuple[Any, Any]:
    """(start layer, rank of the cost of removing it, 0 = cheapest .. 1 = costliest) for the overlay across runs:
    runs of different metrics (drift, kl, ppl, accuracy) and scales (a ppl of 40,000 for layer 0) share one axis."""
    t = run.tables["prune"]
    t = t[t["metric"] == run.summary["metric"]].sort_values("layer")
    cost = -t["delta"] if run.summary.get("higher_is_better", True) else t["delta"]
    ranks = cost.rank(method="average") - 1
    return t["layer"], ranks / max(1, len(t) - 1)
