"""The papers' angular-distance heatmap: x = first layer l, y = block size n, one colour scale over the data."""

from __future__ import annotations

from typing import Any

import numpy as np


def distance_grid(table: Any) -> np.ndarray:
    """angular.csv rows (layer, n, distance) -> grid[n-1, l] = d(l, l+n), NaN where l + n > L."""
    num_layers = int(table["n"].max())
    grid = np.full((num_layers, num_layers), np.nan)
    for row in table.itertuples():
        grid[int(row.n) - 1, int(row.layer)] = row.distance
    return grid


def angular_heatmap(distance: np.ndarray, title: str, limits: tuple[float, float] | None = None,
                    kinds: list[str] | None = None) -> Any:
    """distance: (L+1, L+1) mean d(x_i, x_j). Cells with l + n > L are blank; per-row minimum boxed.
    limits: the colour scale (default: this run's smallest and largest distance; the report passes one shared
    range to runs shown side by side). kinds: each layer's kind; a hybrid's tick labels carry its mark."""
    num_layers = distance.shape[0] - 1
    grid = np.full((num_layers, num_layers), np.nan)  # grid[n-1, l] = d(l, l+n)
    for n in range(1, num_layers + 1):
        for layer in range(num_layers - n + 1):
            grid[n - 1, layer] = distance[layer, layer + n]
    return heatmap_of_grid(grid, title, limits, kinds)


def layer_ticks(ax: Any, ticks: range, kinds: list[str] | None, label: str, names: list[str] | None = None) -> None:
    """x ticks at `ticks` (named `names`, else by position); where the layers are of several kinds (a hybrid),
    each tick carries the layer's mark and the axis label says what the marks mean."""
    from layerprobe.models.layers import kind_marks

    ticks = list(ticks)
    names = names if names is not None else [str(t) for t in ticks]
    ax.set_xticks(ticks)
    if kinds and len(set(kinds)) > 1:
        marks = kind_marks([part for kind in kinds for part in kind.split("+")])
        ax.set_xticklabels([f"{name}\n{'+'.join(marks[k] for k in kinds[t].split('+'))}"
                            for t, name in zip(ticks, names)])
        label += " (" + ", ".join(f"{mark} {kind.replace('_', ' ')}" for kind, mark in marks.items()) + ")"
    else:
        ax.set_xticklabels(names)
    ax.set_xlabel(label)


def heatmap_of_grid(grid: np.ndarray, title: str, limits: tuple[float, float] | None = None,
                    kinds: list[str] | None = None) -> Any:
    import matplotlib
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    num_layers = grid.shape[0]
    low, high = limits if limits is not None else (float(np.nanmin(grid)), float(np.nanmax(grid)))
    norm = Normalize(vmin=low, vmax=high if high > low else low + 1e-12)
    size = min(10.0, 3.0 + 0.22 * num_layers)
    fig = Figure(figsize=(size + 1.2, size * 0.8))
    ax = fig.subplots()
    # viridis reversed: small distances yellow, large purple, as in Gromov et al. and Mix-LN Fig. 2/3/5.
    cmap = matplotlib.colormaps["viridis_r"].with_extremes(bad="white")
    image = ax.imshow(grid, origin="lower", cmap=cmap, norm=norm, aspect="auto",
                      extent=(-0.5, num_layers - 0.5, 0.5, num_layers + 0.5))
    for n in range(1, num_layers + 1):
        row = grid[n - 1, : num_layers - n + 1]
        best = int(np.nanargmin(row))
        ax.add_patch(Rectangle((best - 0.5, n - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.4))
    if num_layers <= 12:  # small models: print the values, as a table would, with the digits the red box needs
        for n in range(1, num_layers + 1):
            for layer in range(num_layers - n + 1):
                value = grid[n - 1, layer]
                r, g, b, _ = cmap(norm(value))
                dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5  # relative luminance of the cell
                ax.text(layer, n, f"{value:.3f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
    ax.set_ylabel("Block size $n$")
    ax.set_title(title, fontsize=10)
    step = -(-num_layers // 16)  # at most 16 labelled ticks: a 30-layer grid stays readable at half a page
    layer_ticks(ax, range(0, num_layers, step), kinds, "Layer $\\ell$")
    ax.set_yticks(range(1, num_layers + 1, step))
    ax.tick_params(labelsize=8)
    bar = fig.colorbar(image, ax=ax)
    # short enough for the bar's height; the range is on the bar's own ticks
    scale = ", shared scale" if limits is not None else ""  # one range for the runs shown together
    bar.set_label(f"$d(x^\\ell, x^{{\\ell+n}})${scale}", fontsize=8)
    bar.ax.tick_params(labelsize=8)
    # what the red boxes mean, in the figure itself, under the axes (never over a cell)
    fig.text(0.01, 0.01, "Red box: the smallest distance of each block size $n$, the block to remove first.",
             fontsize=7, ha="left", va="bottom", color="#b00000")
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    return fig
