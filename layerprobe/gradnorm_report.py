"""Outputs of `layerprobe gradnorm`: gradnorm.csv, the per-placement line plot, summary and manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def depth_ratio(values: list[float]) -> float | None:
    """Mean of the last third of layers over the first third: < 1 means gradients shrink with depth."""
    third = max(1, len(values) // 3)
    early, late = sum(values[:third]) / third, sum(values[-third:]) / third
    return late / early if early > 0 else None


def write_gradnorm_outputs(folder: Path, raw: Any, table: Any, config: Any, facts: dict, started: str,
                           seconds: float, warnings: list[str]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layerprobe.gradnorm import GradnormRun
    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.manifest import build_manifest

    columns = ["norm", "layer", "kind", "module", "grad_norm", "std", "samples"]
    write_csv(folder / "gradnorm.csv", table[columns])
    write_csv(folder / "gradnorm_samples.csv", raw)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    per_norm = {}
    for ax, kind, label in ((axes[0], "params", "block parameters"), (axes[1], "input", "block input (per token)")):
        for norm, part in table[(table["kind"] == kind) & (table["module"] == "block")].groupby("norm", sort=False):
            part = part.sort_values("layer")
            ax.errorbar(part["layer"], part["grad_norm"], yerr=part["std"], marker="o", markersize=3,
                        capsize=2, linewidth=1.3, label=norm)
            per_norm.setdefault(norm, {})[kind] = part["grad_norm"].tolist()
        ax.set_yscale("log")
        ax.set_xlabel("Layer")
        ax.set_ylabel("Gradient norm")
        ax.set_title(f"Gradient norm of the {label}", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"{facts['model']} at initialization ({facts['seeds']} seeds x {facts['batches']} batches)", fontsize=10)
    fig.tight_layout()
    save_figure(folder / "gradnorm", fig, config.formats)
    plt.close(fig)
    summary = {
        "command": "gradnorm",
        **facts,
        "placements": {
            norm: {
                "params_late_over_early": depth_ratio(kinds.get("params", [])),
                "input_late_over_early": depth_ratio(kinds.get("input", [])) if kinds.get("input") else None,
                "params_by_layer": kinds.get("params", []),
            }
            for norm, kinds in per_norm.items()
        },
        "seconds": round(seconds, 3),
        "warnings": warnings,
    }
    write_json(folder / "summary.json", summary)
    write_json(folder / "manifest.json", build_manifest("gradnorm", config.to_dict(), started, seconds, **facts))
    return GradnormRun(folder, table, summary, warnings)
