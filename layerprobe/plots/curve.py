"""Removal curves: the task's score against the fraction of layers removed, one line per strategy (in the style of
Gromov et al. 2024, Fig. 1), with the unpruned baseline, the tolerance edge and chance where the task has one."""

from __future__ import annotations

from typing import Any

from layerprobe.strategies import STRATEGIES

def curve_plot(table: Any, metric: str, baseline: float, chance: float | None, edge: float, title: str,
               healed_baseline: float | None = None) -> Any:
    """table: curve.csv rows (strategy, k, fraction, score); edge: the score at the tolerance's limit;
    healed_baseline: --heal-steps, the unpruned model healed the same way (where the healed lines start)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    fractions = [0.0, *sorted(set(table["fraction"]))]
    for strategy, rows in table.groupby("strategy", sort=False):
        known = STRATEGIES.get(strategy)
        colour, marker = (known.colour, known.marker) if known else ("black", "x")
        rows = rows.sort_values("k")
        ax.plot([0.0, *rows["fraction"]], [baseline, *rows["score"]], color=colour, marker=marker, markersize=4,
                linewidth=1.4, label=known.label if known else strategy)
        if "delta_lo" in rows and rows["delta_lo"].notna().any():  # each point's paired 95% interval
            known_rows = rows[rows["delta_lo"].notna()]
            ax.fill_between(known_rows["fraction"], baseline + known_rows["delta_lo"], baseline + known_rows["delta_hi"],
                            color=colour, alpha=0.15, linewidth=0)
        if "healed_score" in rows and rows["healed_score"].notna().any():  # --heal-steps: the healed line beside it
            start = baseline if healed_baseline is None else healed_baseline
            ax.plot([0.0, *rows["fraction"]], [start, *rows["healed_score"]], color=colour, marker=marker,
                    markersize=3, linewidth=1.1, linestyle="--", markerfacecolor="none",
                    label=f"{known.label if known else strategy}, healed")
            if "healed_delta_lo" in rows and rows["healed_delta_lo"].notna().any():  # its paired interval, hatched
                healed = rows[rows["healed_delta_lo"].notna()]
                ax.fill_between(healed["fraction"], start + healed["healed_delta_lo"],
                                start + healed["healed_delta_hi"], facecolor="none", edgecolor=colour, alpha=0.35,
                                hatch="////", linewidth=0)
    if baseline != 0:  # kl and drift: the unpruned model's 0 is the axis itself (the curves start there)
        ax.axhline(baseline, color="black", linewidth=0.9, linestyle="--", label=f"unpruned ({baseline:.4g})")
    if healed_baseline is not None:  # the same healing also adapts the unpruned model to the corpus
        ax.axhline(healed_baseline, color="black", linewidth=0.9, linestyle="-.",
                   label=f"unpruned, healed alike ({healed_baseline:.4g})")
    ax.axhline(edge, color="black", linewidth=0.8, linestyle=":", label=f"tolerance edge ({edge:.4g})")
    if chance is not None:
        ax.axhline(chance, color="#8e44ad", linewidth=0.9, linestyle="-.", label=f"chance ({chance:g})")
    ax.set_xlim(0, max(fractions) * 1.02 if max(fractions) > 0 else 1)
    scores = [v for v in table["score"] if v == v] + [v for v in table.get("healed_score", []) if v == v]
    if scores and min(scores) >= 0 and max(scores) > 50 * max(edge, 1e-12) and table["metric"].iloc[0] != "acc":
        # lower-is-better scores over decades (one bad strategy's kl of 10 beside 0.1): a log axis shows them all,
        # linear below the tolerance edge so the unpruned 0 of kl and drift is on the plot
        if metric == "ppl":  # at least 1: a plain log axis, no 0 to show
            ax.set_yscale("log")
        else:
            ax.set_yscale("symlog", linthresh=max(edge, 1e-6), linscale=0.5)
            ax.set_ylim(bottom=0)
    num_layers = round(table["k"].iloc[0] / table["fraction"].iloc[0])
    top = ax.secondary_xaxis("top", functions=(lambda f: f * num_layers, lambda k: k / num_layers))
    top.tick_params(labelsize=8)
    top.set_xlabel("Layers removed", fontsize=8, labelpad=3)
    ax.set_xlabel("Fraction of layers removed")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10, pad=8)
    ax.grid(alpha=0.25, linewidth=0.6)
    # the legend under the axes: never over a curve or the tolerance line
    handles, labels = ax.get_legend_handles_labels()
    rows = -(-len(labels) // 3)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.set_figheight(fig.get_figheight() + 0.22 * rows)
    fig.tight_layout(rect=(0, 0.26 * rows / fig.get_figheight() + 0.01, 1, 1))
    return fig
