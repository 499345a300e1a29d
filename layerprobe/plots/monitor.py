"""monitor.png: layer x step heatmaps of d(l, 1) and of the gradient norm, the step where the deep layers' d(l, 1)
falls below the shallow ones' marked on both."""

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
    ax.set_title(title, fontsize=10)
    if crossover is not None and crossover in steps:
        ax.axvline(steps.index(crossover), color="red", linestyle="--", linewidth=1.2,
                   label=f"deep d(l,1) < shallow from step {crossover}")
        ax.legend(loc="upper right", fontsize=7)


def monitor_figure(table: Any, title: str, crossover: int | None) -> Any:
    """Two panels, layer (y) by measured step (x): d(l, 1) and the parameter gradient norm (log colour scale)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2)
    distance, steps = _grid(table, "distance_next")
    _panel(fig, left, distance, steps, "d(x_l, x_l+1) on the probe batches", "d(l, 1)", False, crossover)
    grads, steps = _grid(table, "grad_norm")
    if np.isfinite(grads).any():
        _panel(fig, right, grads, steps, "block parameter gradient norm", "||grad||", True, crossover)
    else:
        right.set_axis_off()
        right.text(0.5, 0.5, "no gradients recorded", ha="center", va="center")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
