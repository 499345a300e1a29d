"""The papers' angular-distance heatmap: x = first layer l, y = block size n, one shared color scale."""

from __future__ import annotations

from typing import Any

import numpy as np


def angular_heatmap(distance: np.ndarray, title: str) -> Any:
    """distance: (L+1, L+1) mean d(x_i, x_j). Cells with l + n > L are blank; per-row minimum boxed."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    num_layers = distance.shape[0] - 1
    grid = np.full((num_layers, num_layers), np.nan)  # grid[n-1, l] = d(l, l+n)
    for n in range(1, num_layers + 1):
        for layer in range(num_layers - n + 1):
            grid[n - 1, layer] = distance[layer, layer + n]
    size = min(10.0, 3.0 + 0.22 * num_layers)
    fig = Figure(figsize=(size + 1.2, size * 0.8))
    ax = fig.subplots()
    # viridis reversed: small distances yellow, large purple, as in Gromov et al. and Mix-LN Fig. 2/3/5.
    cmap = matplotlib.colormaps["viridis_r"].with_extremes(bad="white")
    image = ax.imshow(grid, origin="lower", cmap=cmap, vmin=0.0, vmax=np.nanmax(grid), aspect="auto",
                      extent=(-0.5, num_layers - 0.5, 0.5, num_layers + 0.5))
    for n in range(1, num_layers + 1):
        row = grid[n - 1, : num_layers - n + 1]
        best = int(np.nanargmin(row))
        ax.add_patch(Rectangle((best - 0.5, n - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2))
    if num_layers <= 12:  # small models: print the values, as a table would
        for n in range(1, num_layers + 1):
            for layer in range(num_layers - n + 1):
                value = grid[n - 1, layer]
                shade = "white" if value > 0.6 * np.nanmax(grid) else "black"
                ax.text(layer, n, f"{value:.2f}", ha="center", va="center", fontsize=7, color=shade)
    ax.set_xlabel("Layer $\\ell$")
    ax.set_ylabel("Block size $n$")
    ax.set_title(title, fontsize=10)
    step = max(1, num_layers // 16)
    ax.set_xticks(range(0, num_layers, step))
    ax.set_yticks(range(1, num_layers + 1, step))
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("Angular distance $d(x^\\ell, x^{\\ell+n})$")
    fig.tight_layout()
    return fig
