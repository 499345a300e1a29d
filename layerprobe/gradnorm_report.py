"""Outputs of `layerprobe gradnorm`: gradnorm.csv, variance.csv, loss.csv, the plots, summary and manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def depth_ratio(values: list[float]) -> float | None:
    """Mean of the last third of layers over the first third: < 1 means gradients shrink with depth."""
    third = max(1, len(values) // 3)
    early, late = sum(values[:third]) / third, sum(values[-third:]) / third
    return late / early if early > 0 else None


def write_gradnorm_outputs(folder: Path, raw: Any, table: Any, variance: Any, losses: Any, config: Any,
                           facts: dict, started: str, seconds: float, warnings: list[str]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layerprobe.gradnorm import GradnormRun
    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.manifest import build_manifest

    columns = ["norm", "layer", "kind", "module", "grad_norm", "std", "samples", "step"]
    write_csv(folder / "gradnorm.csv", table[columns])
    write_csv(folder / "gradnorm_samples.csv", raw)
    write_csv(folder / "variance.csv", variance[["norm", "step", "layer", "variance", "std", "samples"]])
    if len(losses):
        write_csv(folder / "loss.csv", losses)
    steps = sorted(table["step"].unique())
    first, last = steps[0], steps[-1]
    whole = table[table["module"] == "block"]

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    panels = ((axes[0], "params", "Gradient norm of the block parameters"),
              (axes[1], "input", "Gradient norm of the block input (per token)"))
    colors = {}
    for ax, kind, title in panels:
        for step, style in ((first, "-"), (last, "--")) if last != first else ((first, "-"),):
            for norm, part in whole[(whole["kind"] == kind) & (whole["step"] == step)].groupby("norm", sort=False):
                part = part.sort_values("layer")
                line = ax.errorbar(part["layer"], part["grad_norm"], yerr=part["std"], marker="o", markersize=3,
                                   capsize=2, linewidth=1.3, linestyle=style, color=colors.get(norm),
                                   label=norm if step == first else f"{norm}, step {step}")
                colors.setdefault(norm, line[0].get_color())
        ax.set_yscale("log")
        ax.set_xlabel("Layer")
        ax.set_ylabel("Gradient norm")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, frameon=False)
    ax = axes[2]
    for step, style in ((first, "-"), (last, "--")) if last != first else ((first, "-"),):
        for norm, part in variance[variance["step"] == step].groupby("norm", sort=False):
            part = part.sort_values("layer")
            ax.plot(part["layer"], part["variance"], marker="o", markersize=3, linewidth=1.3, linestyle=style,
                    color=colors.get(norm), label=norm if step == first else f"{norm}, step {step}")
    ax.set_yscale("log")
    ax.set_xlabel("Layer")
    ax.set_ylabel("Output variance")
    ax.set_title("Variance of the block output", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    when = "at initialization" if last == 0 else f"at step {first} (solid) and {last} (dashed)"
    fig.suptitle(f"{facts['model']} {when} ({facts['seeds']} seeds x {facts['batches']} batches)", fontsize=10)
    fig.tight_layout()
    save_figure(folder / "gradnorm", fig, config.formats)
    plt.close(fig)
    if last != first:
        _variance_by_step(folder, variance, facts, config.formats)

    def series(frame: Any, norm: str, step: int, kind: str | None, value: str) -> list[float]:
        part = frame[(frame["norm"] == norm) & (frame["step"] == step)]
        if kind is not None:
            part = part[part["kind"] == kind]
        return part.sort_values("layer")[value].tolist()

    placements = {}
    for norm in whole["norm"].unique():
        by_step = {}
        for step in steps:
            params, inputs = series(whole, norm, step, "params", "grad_norm"), series(whole, norm, step, "input", "grad_norm")
            var = series(variance, norm, step, None, "variance")
            by_step[int(step)] = {
                "params_late_over_early": depth_ratio(params),
                "input_late_over_early": depth_ratio(inputs) if inputs else None,
                "variance_late_over_early": depth_ratio(var) if var else None,
                "params_by_layer": params,
                "variance_by_layer": var,
            }
        placements[norm] = {**by_step[int(first)], "steps": by_step} if last != first else by_step[int(first)]
    summary = {"command": "gradnorm", **facts, "placements": placements, "seconds": round(seconds, 3),
               "warnings": warnings}
    if len(losses):
        final = losses[losses["step"] == losses["step"].max()].groupby("norm", sort=False)["loss"].mean()
        summary["final_loss"] = {norm: float(v) for norm, v in final.items()}
    write_json(folder / "summary.json", summary)
    write_json(folder / "manifest.json", build_manifest("gradnorm", config.to_dict(), started, seconds, **facts))
    return GradnormRun(folder, table, summary, warnings)


def _variance_by_step(folder: Path, variance: Any, facts: dict, formats: tuple[str, ...]) -> None:
    """Curse-of-Depth Fig. 4 view: per placement, output variance against depth, one line per recorded step."""
    import matplotlib.pyplot as plt

    from layerprobe.runs.folder import save_figure

    norms = list(variance["norm"].unique())
    fig, axes = plt.subplots(1, len(norms), figsize=(3.6 * len(norms), 3.4), sharey=True, squeeze=False)
    cmap = plt.get_cmap("viridis")
    steps = sorted(variance["step"].unique())
    for ax, norm in zip(axes[0], norms):
        for i, step in enumerate(steps):
            part = variance[(variance["norm"] == norm) & (variance["step"] == step)].sort_values("layer")
            ax.plot(part["layer"], part["variance"], marker="o", markersize=2.5, linewidth=1.2,
                    color=cmap(i / max(1, len(steps) - 1)), label=f"step {step}")
        ax.set_yscale("log")
        ax.set_title(norm, fontsize=10)
        ax.set_xlabel("Layer")
    axes[0][0].set_ylabel("Output variance")
    axes[0][-1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{facts['model']}: output variance by layer during training", fontsize=10)
    fig.tight_layout()
    save_figure(folder / "variance", fig, formats)
    plt.close(fig)
