"""Healing: the training loss by step, and the held-out ppl and kl of the shortened model before, during and after."""

from __future__ import annotations

from typing import Any


def heal_plot(table: Any, title: str, unpruned_ppl: float | None = None) -> Any:
    """table: heal.csv (step, loss, lr, heldout_ppl, heldout_kl); NaN where a step was not scored. unpruned_ppl:
    the unpruned model's held-out ppl, drawn as the ppl panel's floor (the kl panel's is 0 by definition)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.6, 3.6))
    loss_ax, ppl_ax, kl_ax = fig.subplots(1, 3)
    trained = table[table["step"] > 0]
    replaced = bool(trained["loss"].isna().all())  # lstsq, cosine: step 0 removed, step 1 the maps folded
    loss_ax.plot(trained["step"], trained["loss"], color="#2e86c1", linewidth=1.0)
    loss_ax.set_title("training loss", fontsize=9)
    loss_ax.set_ylabel("loss per token (nats)", fontsize=8)
    if replaced:
        loss_ax.text(0.5, 0.5, "no training:\nlinear maps fitted\nand folded", ha="center", va="center",
                     transform=loss_ax.transAxes, fontsize=9)
        loss_ax.set_xticks([])
        loss_ax.set_yticks([])
        loss_ax.set_title("training", fontsize=9)
    scored = table.dropna(subset=["heldout_ppl"])
    for ax, column, colour, name, unit in ((ppl_ax, "heldout_ppl", "#27ae60", "held-out ppl", "perplexity"),
                                           (kl_ax, "heldout_kl", "#c0392b", "held-out KL(unpruned || healed)",
                                            "KL per token (nats)")):
        ax.plot(scored["step"], scored[column], color=colour, marker="o", markersize=3, linewidth=1.2)
        if len(scored):
            ax.axhline(scored[column].iloc[0], color="black", linestyle=":", linewidth=0.8, label="before healing")
            if column == "heldout_ppl" and unpruned_ppl is not None:
                ax.axhline(unpruned_ppl, color="grey", linestyle="--", linewidth=0.8, label="unpruned model")
            ax.legend(fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        # from the floor of each quantity (kl 0, ppl 1): a change of 0.05
        # must not fill the panel as if it were the whole distance
        floor = 0.0 if column == "heldout_kl" else 1.0
        ax.set_ylim(bottom=floor)
    for ax in (loss_ax, ppl_ax, kl_ax):
        ax.set_xlabel("" if replaced else "step")
        ax.tick_params(labelsize=8)
    if replaced:
        for ax in (ppl_ax, kl_ax):
            ax.set_xticks([0, 1], ["removed", "replaced"])
            ax.set_xlim(-0.3, 1.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
