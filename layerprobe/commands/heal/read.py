"""How the report reads a heal run (the record's Kind names these): its finding and its per-step table; heal runs
are not compared."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.read import Run


def heal_findings(run: Run) -> list[str]:
    s = run.summary
    before, after, unpruned = s["heldout_before"], s["heldout_after"], s.get("heldout_unpruned_ppl")
    won = ""
    if unpruned is not None and before["ppl"] > unpruned:  # the share of the removal's ppl cost won back
        share = (before["ppl"] - after["ppl"]) / (before["ppl"] - unpruned)
        won = f" (the unpruned model's: {unpruned:.4g}; {share:.0%} of the removal's cost won back)"
    method = s.get("method", "lora")
    if method == "lora":
        how = f"{s['objective']}, {s['steps']} steps, LoRA rank {s['lora_rank']}"
    elif method == "tail":
        how = f"{s['objective']}, {s['steps']} steps of the LM head and the last {s.get('tail_blocks')} blocks"
    else:
        how = f"{method} replacement, no training, fitted on {s.get('train_tokens')} tokens"
    return [f"Healing the model without {s['removed']} ({how}) moved the held-out ppl from {before['ppl']:.4g} to {after['ppl']:.4g}{won} and the kl "
            f"to the unpruned model from {before['kl']:.4g} to {after['kl']:.4g}."]


def heal_table(run: Run) -> Any:
    """The scored steps of heal.csv."""
    table = run.tables["heal"]
    return table.dropna(subset=["heldout_ppl"]).reset_index(drop=True)
