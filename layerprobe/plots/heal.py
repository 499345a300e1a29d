"""Healing: the training loss by step (methods that train), and the held-out ppl and kl of the shortened model before,
during and after, with the paired intervals of their change from before where heal.csv has them."""

from __future__ import annotations

from typing import Any


def _loss_panel(ax: Any, trained: Any) -> None:
    ax.plot(trained["step"], trained["loss"], color="#2e86c1", linewidth=1.0)
    ax.set_title("training loss", fontsize=9)
    ax.set_ylabel("loss per token (nats)", fontsize=8)
    ax.set_xlabel("step")
    ax.tick_params(labelsize=8)


def _score_panel(ax: Any, scored: Any, column: str, colour: str, unpruned_ppl: float | None) -> None:
    """One held-out score by step; its paired 95% interval (of the change from step 0, drawn around step 0's value
    plus the change) as error bars where heal.csv has it."""
    import numpy as np

    metric = column.split("_")[1]
    ax.plot(scored["step"], scored[column], color=colour, marker="o", markersize=3, linewidth=1.2)
    lo, hi = f"{metric}_change_lo", f"{metric}_change_hi"
    if len(scored) and lo in scored and scored[lo].notna().any():
        start = float(scored[column].iloc[0])
        rows = scored[scored[lo].notna()]
        below = np.clip(rows[column] - (start + rows[lo]), 0, None)
        above = np.clip(start + rows[hi] - rows[column], 0, None)
        ax.errorbar(rows["step"], rows[column], yerr=[below, above], fmt="none", ecolor=colour, elinewidth=1.0,
                    capsize=3, label="paired 95% interval of the change")
    if len(scored):
        ax.axhline(scored[column].iloc[0], color="black", linestyle=":", linewidth=0.8, label="before healing")
        if column == "heldout_ppl" and unpruned_ppl is not None:
            ax.axhline(unpruned_ppl, color="grey", linestyle="--", linewidth=0.8, label="unpruned model")
        ax.legend(fontsize=7)
    name, unit = (("held-out ppl", "perplexity") if metric == "ppl" else
                  ("held-out KL(unpruned || healed)", "KL per token (nats)"))
    ax.set_title(name, fontsize=9)
    ax.set_ylabel(unit, fontsize=8)
    # from the floor of each quantity (kl 0, ppl 1): a change of 0.05 must not fill the panel as if it were the whole
    # distance
    ax.set_ylim(bottom=0.0 if metric == "kl" else 1.0)


def heal_plot(table: Any, title: str, unpruned_ppl: float | None = None) -> Any:
    """table: heal.csv (step, loss, lr, heldout_ppl, heldout_kl, and the change intervals); NaN where a step was not
    scored. unpruned_ppl: the unpruned model's held-out ppl, drawn as the ppl panel's floor (the kl panel's is 0 by
    definition). A panel is drawn only where it has data: no training-loss panel for lstsq and cosine."""
    from matplotlib.figure import Figure

    trained = table[(table["step"] > 0) & table["loss"].notna()]
    replaced = trained.empty  # lstsq, cosine: step 0 removed, step 1 the maps folded, nothing trained
    fig = Figure(figsize=(6.8 if replaced else 9.6, 3.6))
    axes = list(fig.subplots(1, 2 if replaced else 3))
    if not replaced:
        _loss_panel(axes.pop(0), trained)
    scored = table.dropna(subset=["heldout_ppl"])
    for ax, column, colour in zip(axes, ("heldout_ppl", "heldout_kl"), ("#27ae60", "#c0392b")):
        _score_panel(ax, scored, column, colour, unpruned_ppl)
        ax.tick_params(labelsize=8)
        if replaced:
            ax.set_xticks([0, 1], ["removed", "replaced"])
            ax.set_xlim(-0.3, 1.3)
        else:
            ax.set_xlabel("step")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
