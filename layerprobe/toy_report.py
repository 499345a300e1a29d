"""Outputs of `layerprobe toy`: toy.csv, power-law fits in summary.json, the three-panel plot, manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def fits(table: Any) -> dict:
    """Per placement and alpha: log-log slopes over the deep half of norm, 1 - cos_next and the gradient norm."""
    from layerprobe.toy import power_law

    out: dict = {}
    for (norm, alpha), part in table.groupby(["norm", "alpha"], sort=False):
        deep = part[part["layer"] >= part["layer"].max() / 2]
        out.setdefault(norm, {})[f"alpha={alpha:g}"] = {
            "hidden_norm": power_law(deep["layer"], deep["hidden_norm"]),
            "one_minus_cos_next": power_law(deep["layer"], 1.0 - deep["cos_next"]),
            "grad_norm": power_law(deep["layer"], deep["grad_norm"]),
        }
    return out


def write_toy_outputs(folder: Path, table: Any, config: Any, started: str, seconds: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.manifest import build_manifest
    from layerprobe.toy import COLUMNS, EXPECTED_PRE, ToyRun

    write_csv(folder / "toy.csv", table[COLUMNS])
    fitted = fits(table)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    panels = (("hidden_norm", "||h_l||", "Norm of the residual stream", True),
              ("one_minus_cos_next", "1 - cos(h_l, h_l+1)", "Change per block", True),
              ("effective_rank", "effective rank", "Effective rank of h_l", False),
              ("grad_norm", "||dL/dW_l||", "Gradient norm of block l", True))
    styles = ["-", "--", ":", "-."]
    for ax, (column, ylabel, title, loglog) in zip(axes, panels):
        for (norm, alpha), part in table.groupby(["norm", "alpha"], sort=False):
            y = 1.0 - part["cos_next"] if column == "one_minus_cos_next" else part[column]
            style = styles[list(config.alphas).index(alpha) % len(styles)]
            label = norm if len(config.alphas) == 1 else f"{norm}, alpha {alpha:g}"
            slope = (fitted[norm][f"alpha={alpha:g}"].get(column) or {}).get("slope")
            if loglog and slope is not None:
                label += f" (slope {slope:+.2f})"
            ax.plot(part["layer"], y, linestyle=style, linewidth=1.3, label=label)
        if loglog:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("Layer l")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"Residual-MLP toy: depth {config.depth}, width {config.width}, {config.samples} Gaussian inputs "
                 "(slopes: log-log fit over the deep half)", fontsize=10)
    fig.tight_layout()
    save_figure(folder / "toy", fig, config.formats)
    plt.close(fig)
    summary = {"command": "toy", "model": "toy", "num_layers": config.depth, "width": config.width,
               "samples": config.samples, "alphas": list(config.alphas), "seed": config.seed,
               "fits": fitted, "expected_pre_ln": EXPECTED_PRE, "seconds": round(seconds, 3), "warnings": []}
    write_json(folder / "summary.json", summary)
    write_json(folder / "manifest.json", build_manifest("toy", config.to_dict(), started, seconds,
                                                        model="toy", device="cpu", dtype="float32"))
    return ToyRun(folder, table, summary)
