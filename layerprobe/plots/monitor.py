"""monitor.png: layer x step heatmaps of d(l, 1) and of the gradient norm, and the shallow and deep thirds' mean
d(l, 1) by step; the step where the deep layers' d(l, 1) falls below the shallow ones' marked on each."""

from __future__ import annotations

from typing import Any

import numpy as np


def _grid(table: Any, column: str) -> tuple[np.ndarray, list[int]]:
    """(grid[layer, step index], steps) of one monitor.csv column over the blocks (the output row has no block)."""
    blocks = table[table["layer"] < table["layer"].max()]
    wide = blocks.pivot(index="layer", columns="step", values=column).sort_index().sort_index(axis=1)
    return wide.to_numpy(dtype=float), [int(s) for s in wide.columns]


def _panel(fig: Any, ax: Any, grid: np.ndarray, steps: list[int], title: str, label: str, log: bool,
           crossover: int | None) -> None:
    from matplotlib.colors import LogNorm

    finite = grid[np.isfinite(grid) & (grid > 0)] if log else grid[np.isfinite(grid)]
    norm = LogNorm(vmin=finite.min(), vmax=finite.max()) if log and finite.size and finite.min() < finite.max() else None
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower", cmap="viridis", norm=norm,
                      interpolation="nearest")
    fig.colorbar(image, ax=ax, label=label)
    every = max(1, len(steps) // 8)
    ax.set_xticks(range(0, len(steps), every), [str(s) for s in steps[::every]], fontsize=8)
    ax.set_xlabel("training step")
    ax.set_ylabel("layer l")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    if crossover is not None and crossover in steps:
        ax.axvline(steps.index(crossover), color="red", linestyle="--", linewidth=1.2,
                   label=f"deep d(l,1) < shallow from step {crossover}")
        ax.legend(loc="upper right", fontsize=7)


def _thirds_panel(ax: Any, thirds: Any, crossover: int | None) -> None:
    """The shallow and deep thirds' mean d(l, 1) by step: where the deep line falls below, the marked step."""
    ax.plot(thirds.index, thirds["shallow"], marker="o", markersize=3, label="first third of blocks")
    ax.plot(thirds.index, thirds["deep"], marker="s", markersize=3, label="last third of blocks")
    if crossover is not None:
        ax.axvline(crossover, color="red", linestyle="--", linewidth=1.2, label=f"deep below from step {crossover}")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean d(l, 1)")
    ax.set_title("shallow vs deep layers", fontsize=10)
    ax.legend(fontsize=7)


def monitor_figure(table: Any, thirds: Any, title: str, crossover: int | None) -> Any:
    """Three panels: d(l, 1) and the parameter gradient norm (log colour scale), layer (y) by measured step (x),
    and the shallow and deep thirds' mean d(l, 1) by step (thirds: a DataFrame by step, shallow and deep)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.2))
    left, middle, right = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 1.1, 0.9]})
    distance, steps = _grid(table, "distance_next")
    _panel(fig, left, distance, steps, "d(x_l, x_l+1) on the probe batches", "d(l, 1)", False, crossover)
    grads, steps = _grid(table, "grad_norm")
    if np.isfinite(grads).any():
        _panel(fig, middle, grads, steps, "block parameter gradient norm", "||grad||", True, crossover)
    else:
        middle.set_axis_off()
        middle.text(0.5, 0.5, "no gradients recorded", ha="center", va="center")
    _thirds_panel(right, thirds, crossover)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def training_figure(table: Any, found: dict, facts: dict) -> Any:
    """gradnorm --steps' training.png: per placement (a column each, seeds averaged), d(l, 1) by layer and step
    above, the shallow and deep thirds' mean d(l, 1) by step below; the crossover step marked on both.
    found: per placement, its `crossover_step` (gradnorm's training summary)."""
    from matplotlib.figure import Figure

    from layerprobe.metrics.thirds import thirds

    placements = list(dict.fromkeys(table["placement"]))
    fig = Figure(figsize=(3.6 * len(placements) + 1, 6.4))
    axes = fig.subplots(2, len(placements), squeeze=False)
    for column, placement in enumerate(placements):
        part = table[table["placement"] == placement]
        mean = part.groupby(["step", "layer"], as_index=False)["distance_next"].mean()
        crossover = found[placement]["crossover_step"]
        grid, steps = _grid(mean, "distance_next")
        _panel(fig, axes[0][column], grid, steps, f"{placement}: d(x_l, x_l+1)", "d(l, 1)", False, crossover)
        _thirds_panel(axes[1][column], thirds(mean), crossover)
        axes[1][column].set_title(f"{placement}: shallow vs deep layers", fontsize=10)
    seeds = table["seed"].nunique()
    fig.suptitle(f"{facts['model']}: layers during training ({seeds} seed{'s' if seeds > 1 else ''}, the measuring "
                 "batches)", fontsize=11)
    fig.tight_layout()
    return fig
