"""The toy model's four panels: ||h_l||, 1 - cos(h_l, h_l+1), effective rank and gradient norm by layer."""

from __future__ import annotations

from typing import Any


def toy_figure(table: Any, fitted: dict, config: Any) -> Any:
    """One line per placement (and alpha); log-log axes where the random-walk power laws apply."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(16, 3.6))
    axes = fig.subplots(1, 4)
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
        ax.set_xlabel("Layer $\\ell$")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"Residual-MLP toy: depth {config.depth}, width {config.width}, {config.samples} Gaussian inputs "
                 "(slopes: log-log fit over the deep half)", fontsize=10)
    fig.tight_layout()
    return fig
