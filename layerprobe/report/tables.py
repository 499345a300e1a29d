"""The per-layer numbers printed under each run's plot in the report, one function per command (runs/kinds.py)."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.read import Run


def angular_table(run: Run) -> Any:
    layers = run.tables["layers"]
    extra = [c for c in ("effective_rank", "block_influence", "logit_lens_kl", "router_entropy", "expert_load")
             if c in layers and layers[c].notna().any()]
    kinds = ["layer_type"] if "layer_type" in layers and layers["layer_type"].dropna().nunique() > 1 else []
    return layers[["layer", *kinds, "distance_next", "norm", "cos_input", *extra]].rename(
        columns={"layer_type": "kind", "distance_next": "d(l, 1)", "block_influence": "BI", "logit_lens_kl": "lens KL",
                 "router_entropy": "router H", "expert_load": "load"})


def prune_table(run: Run) -> Any:
    table = run.tables["prune"]
    main = table[table["metric"] == run.summary["metric"]]
    kinds = ["layer_type"] if "layer_type" in main and main["layer_type"].dropna().nunique() > 1 else []
    return main[["removed", *kinds, "baseline", "pruned", "delta"]].rename(columns={"delta": "dP", "layer_type": "kind"})


def curve_table(run: Run) -> Any:
    """k (and the fraction removed) by strategy: the score of the model without those layers."""
    curve = run.tables["curve"]
    return curve.pivot(index=["k", "fraction"], columns="strategy", values="score").reset_index()


def toy_table(run: Run) -> Any:
    toy = run.tables["toy"]
    first = toy[toy["alpha"] == toy["alpha"].iloc[0]]
    return first.pivot(index="layer", columns="norm", values="hidden_norm").reset_index()


def gradnorm_table(run: Run) -> Any:
    table = run.tables["gradnorm"]
    if "step" in table:
        table = table[table["step"] == table["step"].min()]
    params = table[(table["kind"] == "params") & (table["module"] == "block")]
    order = list(dict.fromkeys(params["norm"]))  # as in the plot's legend
    wide = params.pivot(index="layer", columns="norm", values="grad_norm")[order].reset_index()
    return wide.rename(columns={norm: f"{norm}: param grad norm" for norm in order})


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
