"""Performance drop per removed layer (Mix-LN Fig. 2c/d, 3c/d style), optionally with angular distance."""

from __future__ import annotations

from typing import Any

import numpy as np


def prune_bars(labels: list[str], delta: np.ndarray, metric: str, title: str,
               distance: np.ndarray | None = None, correlation: float | None = None,
               signals: dict[str, float] | None = None) -> Any:
    """signals: cheap signal -> Spearman rho with dP, listed in a corner box (which one a user can trust)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5.0, 0.28 * len(labels) + 2.5), 3.6))
    ax = fig.subplots()
    x = np.arange(len(labels))
    colors = ["#3b6fb6" if d >= 0 else "#c0392b" for d in delta]
    ax.bar(x, delta, color=colors, width=0.8)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=90 if len(labels) > 24 else 0, fontsize=8)
    ax.set_xlabel("Removed layer $\\ell$")
    ax.set_ylabel(f"$\\Delta P$ ({metric})")
    ax.set_title(title, fontsize=10)
    if distance is not None:
        twin = ax.twinx()
        label = "angular $d(x^\\ell, x^{\\ell+n})$"
        if correlation is not None:
            label += f" (Spearman $\\rho$ = {correlation:.2f})"
        twin.plot(x, distance, color="#e67e22", marker="o", markersize=3, linewidth=1.2, label=label)
        twin.set_ylabel("angular distance")
        twin.legend(loc="upper right", fontsize=8, frameon=False)
    if signals and len(signals) > 1:
        text = "Spearman $\\rho$ with $\\Delta P$\n" + "\n".join(f"{name}: {rho:+.2f}" for name, rho in signals.items())
        ax.text(0.01, 0.98, text, transform=ax.transAxes, fontsize=7.5, va="top", ha="left",
                bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "#bbbbbb", "alpha": 0.9})
    fig.tight_layout()
    return fig
