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
    out = [f"Healing the model without {s['removed']} ({how}) moved the held-out ppl from {before['ppl']:.4g} to "
           f"{after['ppl']:.4g}{won} and the kl to the unpruned model from {before['kl']:.4g} to {after['kl']:.4g}."]
    said = change_text(s.get("heldout_change"))
    if said:
        out.append(said[0].upper() + said[1:] + ".")
    return out + [merged_text(s)] if "merged" in s else out


def change_text(change: dict | None) -> str:
    """The paired intervals of the held-out change (summary.json heldout_change), or '' for a run without them."""
    if not change or not all((change.get(m) or {}).get("lo") is not None for m in ("ppl", "kl")):
        return ""
    count = change["sequences"]
    parts = []
    for metric in ("ppl", "kl"):
        c = change[metric]
        verdict = ("excludes 0" if c["lo"] > 0 or c["hi"] < 0 else "0 inside it") if change["tested"] else \
            "too few documents to test"
        parts.append(f"{metric} {c['change']:+.4g} ({c['lo']:+.4g} to {c['hi']:+.4g}, {verdict})")
    return (f"the change from healing, with paired 95% intervals over the {count} held-out sequences: "
            f"{'; '.join(parts)}")


def merged_text(s: dict) -> str:
    """What became of merged/: its size, or that --no-merged skipped it."""
    if not s.get("merged"):
        return "No merged/ checkpoint was written (--no-merged): export and the other commands have none to read."
    size = s.get("merged_bytes")
    return "merged/ holds the healed model as a plain transformers checkpoint" + (
        f" ({size / 1e6:,.0f} MB)." if size else ".")


def heal_table(run: Run) -> Any:
    """The scored steps of heal.csv."""
    table = run.tables["heal"]
    return table.dropna(subset=["heldout_ppl"]).reset_index(drop=True)
