"""Several runs of one command on one axis, by relative depth l / (L - 1)."""

from __future__ import annotations

from typing import Any


def overlay_figure(series: list[tuple[str, Any, Any, int]], ylabel: str, title: str) -> Any:
    """One line per (label, layers, values, number of layers), x = layer / (L - 1)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    for label, x, y, num_layers in series:
        depth = max(1, num_layers - 1)
        ax.plot([v / depth for v in x], y, marker="o", markersize=3, linewidth=1.3, label=label)
    ax.set_xlabel("Relative depth l / (L - 1)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    # beside the axes, never over the lines (four runs' lines fill the whole box)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.set_figwidth(7 + 1.6)
    fig.tight_layout()
    return fig
