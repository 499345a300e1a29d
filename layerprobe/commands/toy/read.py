"""How the report reads a toy run (the record's Kind names these): its findings (the deep half's power-law fits) and
its per-layer table; toy runs are not compared."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.read import Run


def toy_findings(run: Run) -> list[str]:
    out = []
    for norm, by_alpha in run.summary.get("fits", {}).items():
        for key, fit in by_alpha.items():
            norm_fit, cos_fit = fit.get("hidden_norm"), fit.get("one_minus_cos_next")
            if norm_fit and cos_fit:
                out.append(f"{norm} ({key}): over the deep half ||h_l|| ~ l^{norm_fit['slope']:.2f} and "
                           f"1 - cos(h_l, h_l+1) ~ l^{cos_fit['slope']:.2f} (Pre-LN random walk: l^0.5 and l^-1).")
    return out


def toy_table(run: Run) -> Any:
    toy = run.tables["toy"]
    first = toy[toy["alpha"] == toy["alpha"].iloc[0]]
    return first.pivot(index="layer", columns="norm", values="hidden_norm").reset_index()
