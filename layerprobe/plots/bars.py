"""Performance drop per removed layer (Mix-LN Fig. 2c/d, 3c/d style), optionally with angular distance."""

from __future__ import annotations

from typing import Any

import numpy as np


def aligned_zero(bars: tuple[float, float], line_top: float) -> tuple[float, float]:
    """Limits of a second y-axis whose 0 sits at the height of the first axis's 0 (a distance is >= 0, dP may be
    negative): two zeros at different heights would make unrelated curves look as if they agreed."""
    low, high = bars
    if high <= 0:  # every bar below zero: the zero line is the top of the axes
        return -line_top, 0.0 + 1e-12
    return low / high * line_top, line_top


def symlog_axis(ax: Any, linear_to: float, top: float) -> float:
    """Linear from 0 to a round `linear_to` (ticks inside it too, so the typical bars can be read), then one tick
    per decade up to `top`; the edge is drawn as a dotted line. Returns the edge (the caller names it in the
    y label)."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    edge = 10 ** math.floor(math.log10(linear_to))
    edge *= next(m for m in (1, 2, 5, 10) if m * edge >= linear_to)  # 1, 2 or 5 times a power of ten
    ax.set_yscale("symlog", linthresh=edge, linscale=1.0)
    decades = [10.0 ** p for p in range(math.floor(math.log10(edge)) + 1, math.ceil(math.log10(top)) + 1)]
    ticks = sorted({0.0, edge / 2, edge, *(d for d in decades if d >= 3 * edge)})  # labels that do not touch
    ax.yaxis.set_major_locator(FixedLocator(ticks + [-t for t in ticks[1:]]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if abs(v) < 1e4 else
                                               f"{'-' if v < 0 else ''}$10^{{{round(math.log10(abs(v)))}}}$"))
    ax.axhline(edge, color="grey", linestyle=":", linewidth=0.8)
    return edge


def prune_bars(labels: list[str], delta: np.ndarray, metric: str, title: str,
               distance: np.ndarray | None = None, correlation: float | None = None,
               signals: dict[str, float] | None = None, block: int = 1, kinds: list[str] | None = None,
               interval: tuple[np.ndarray, np.ndarray] | None = None) -> Any:
    """signals: cheap signal -> Spearman rho with dP, listed under the axes (which one a user can trust). kinds:
    the kind of each bar's removed layer(s); where there are several (a hybrid), each tick carries its mark.
    interval: (low, high) of each dP's paired 95% interval, drawn as error bars where known."""
    from layerprobe.plots.heatmap import layer_ticks
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5.5, 0.28 * len(labels) + 2.5), 4.2))
    ax = fig.subplots()
    x = np.arange(len(labels))
    colors = ["#3b6fb6" if d >= 0 else "#c0392b" for d in delta]
    ax.bar(x, delta, color=colors, width=0.8, label=f"$\\Delta P$ ({metric})")
    ax.axhline(0.0, color="black", linewidth=0.8)
    if interval is not None and np.isfinite(interval[0]).any():
        low, high = (np.asarray(v, dtype=float) for v in interval)
        known = np.isfinite(low) & np.isfinite(high)
        ax.errorbar(x[known], delta[known], yerr=[delta[known] - low[known], high[known] - delta[known]], fmt="none",
                    ecolor="black", elinewidth=0.8, capsize=2, label="paired 95% interval")
    middle = float(np.median(np.abs(delta))) if len(delta) else 0.0
    if len(delta) > 4 and middle > 0 and float(np.max(np.abs(delta))) > 100 * middle:
        # one removal costs 100x the typical one (layer 0 of a Pre-LN model): linear up to the typical cost,
        # logarithmic beyond, so the other bars stay readable
        edge = symlog_axis(ax, middle * 4, float(np.max(np.abs(delta))))
        scale = f"; linear to {edge:g}, log above"
        for i, d in enumerate(delta):  # on a log scale a bar's height hides its size: its value is written on it
            if abs(d) > edge:
                ax.text(i, d, f" {d:+,.0f}" if abs(d) >= 100 else f" {d:+.3g}", ha="center",
                        va="bottom" if d > 0 else "top", fontsize=6, rotation=90)
        low, high = ax.get_ylim()
        ax.set_ylim(low * (30 if low < -edge else 1), high * 30 if high > edge else high)  # room for the values
    else:
        scale = ""
    layer_ticks(ax, range(len(labels)), kinds, "Removed layer $\\ell$" if block == 1 else
                f"Removed block of {block} layers, from $\\ell$", labels)
    ax.tick_params(axis="x", labelrotation=90 if len(labels) > 24 else 0)
    ax.tick_params(labelsize=8)
    ax.xaxis.label.set_fontsize(9)
    ax.set_ylabel(f"$\\Delta P$ ({metric}{scale})", fontsize=9)
    ax.set_title(title, fontsize=10)
    handles = ax.get_legend_handles_labels()
    if distance is not None:
        twin = ax.twinx()
        n = "1" if block == 1 else str(block)
        label = f"angular $d(x^\\ell, x^{{\\ell+{n}}})$"
        if correlation is not None:
            label += f", Spearman $\\rho$ = {correlation:+.2f}"
        twin.plot(x, distance, color="#e67e22", marker="o", markersize=3, linewidth=1.2, label=label)
        top = float(np.nanmax(distance)) * 1.1 or 1.0
        twin.set_ylim(*aligned_zero(ax.get_ylim(), top))
        twin.set_yticks([t for t in twin.get_yticks() if 0 <= t <= top])  # a distance has no negative ticks
        twin.set_ylabel("angular distance", fontsize=9)
        twin.tick_params(labelsize=8)
        more = twin.get_legend_handles_labels()
        handles = (handles[0] + more[0], handles[1] + more[1])
    text = ""
    if signals and len(signals) > 1:
        text = "Spearman $\\rho$ with $\\Delta P$: " + ", ".join(f"{name} {rho:+.2f}" for name, rho in signals.items())
    # legend and correlations below the axes, never over the bars or the line
    height = fig.get_figheight()
    line = 0.26 / height  # one text line, as a fraction of the figure's height
    fig.legend(*handles, loc="lower left", bbox_to_anchor=(0.01, line if text else 0.0), ncol=2, fontsize=8,
               frameon=False)
    if text:
        fig.text(0.015, 0.01, text, ha="left", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, line * (2.6 if text else 1.6), 1, 1))
    return fig
