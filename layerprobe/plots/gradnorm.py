"""Gradient norms and output variance by layer, one line per placement (Mix-LN Fig. 4, Curse of Depth Fig. 4)."""

from __future__ import annotations

from typing import Any


MARKERS = ("o", "s", "^", "D", "v", "P")  # one per placement, so overlapping lines (mix on post) stay visible


def _plain_log_ticks(ax: Any) -> None:
    """Log axes labelled 0.5, 2, 6 rather than 5x10^-1, 2x10^0, 6x10^0."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_formatter(plain)
    span = high / max(low, 1e-300)
    # within a decade every minor tick is labelled, within two only 2 and 5, beyond that none (they would pile up)
    some = FuncFormatter(lambda value, _: f"{value:g}" if f"{value:e}"[0] in "25" else "")
    ax.yaxis.set_minor_formatter(plain if span < 10 else some if span < 100 else NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.tick_params(axis="both", which="major", labelsize=8)


def _step_styles(steps: list) -> tuple:
    first, last = steps[0], steps[-1]
    return ((first, "-"), (last, "--")) if last != first else ((first, "-"),)


def gradnorm_figure(table: Any, variance: Any, facts: dict) -> Any:
    """Three panels: parameter gradient norm, input gradient norm (per token), output variance, by layer."""
    from matplotlib.figure import Figure

    steps = sorted(table["step"].unique())
    first, last = steps[0], steps[-1]
    whole = table[table["module"] == "block"]
    fig = Figure(figsize=(11, 3.9))
    axes = fig.subplots(1, 3)
    order = list(dict.fromkeys(table["norm"]))  # the placements in the order asked: legend, colours, markers
    panels = ((axes[0], "params", "Gradient norm of the block parameters"),
              (axes[1], "input", "Gradient norm of the block input (per token)"))
    colors: dict = {}
    for ax, kind, title in panels:
        for step, style in _step_styles(steps):
            for norm, part in whole[(whole["kind"] == kind) & (whole["step"] == step)].groupby("norm", sort=False):
                part = part.sort_values("layer")
                spread = part["std"] if part["std"].notna().any() else None  # one sample: no bar, never a 0 one
                line = ax.errorbar(part["layer"], part["grad_norm"], yerr=spread,
                                   marker=MARKERS[order.index(norm) % len(MARKERS)], markersize=3.5, markerfacecolor="none",
                                   capsize=2, linewidth=1.2, linestyle=style, color=colors.get(norm),
                                   label=norm if step == first else f"{norm}, step {step}")
                colors.setdefault(norm, line[0].get_color())
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_xlabel("Layer $\\ell$", fontsize=9)
        ax.set_ylabel("Gradient norm", fontsize=9)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, frameon=False)
    ax = axes[2]
    for step, style in _step_styles(steps):
        for norm, part in variance[variance["step"] == step].groupby("norm", sort=False):
            part = part.sort_values("layer")
            ax.plot(part["layer"], part["variance"], marker=MARKERS[order.index(norm) % len(MARKERS)] if norm in order
                    else "o", markersize=3.5, markerfacecolor="none", linewidth=1.2, linestyle=style,
                    color=colors.get(norm), label=norm if step == first else f"{norm}, step {step}")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel("Layer $\\ell$", fontsize=9)
    ax.set_ylabel("Output variance", fontsize=9)
    ax.set_title("Variance of the block output", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    when = "at initialization" if last == 0 else f"at step {first} (solid) and {last} (dashed)"
    fig.suptitle(f"{facts['model']} {when} ({facts['seeds']} seeds x {facts['batches']} batches)", fontsize=10)
    fig.tight_layout()
    return fig


def variance_by_step_figure(variance: Any, facts: dict) -> Any:
    """Curse-of-Depth Fig. 4 view: per placement, output variance against depth, one line per recorded step."""
    import matplotlib
    from matplotlib.figure import Figure

    norms = list(variance["norm"].unique())
    fig = Figure(figsize=(3.6 * len(norms), 3.4))
    axes = fig.subplots(1, len(norms), sharey=True, squeeze=False)
    cmap = matplotlib.colormaps["viridis"]
    steps = sorted(variance["step"].unique())
    for ax, norm in zip(axes[0], norms):
        for i, step in enumerate(steps):
            part = variance[(variance["norm"] == norm) & (variance["step"] == step)].sort_values("layer")
            ax.plot(part["layer"], part["variance"], marker="o", markersize=2.5, linewidth=1.2,
                    color=cmap(i / max(1, len(steps) - 1)), label=f"step {step}")
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_title(norm, fontsize=10)
        ax.set_xlabel("Layer $\\ell$")
    axes[0][0].set_ylabel("Output variance")
    axes[0][-1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{facts['model']}: output variance by layer during training", fontsize=10)
    fig.tight_layout()
    return fig
