"""`layerprobe heal MODEL --remove 20-27 | --from-curve RUN | EXPORTED_DIR`: LoRA healing of the shortened model."""

from __future__ import annotations

from pathlib import Path

from layerprobe.cli.common import call, out, progress_bar, resolve_settings, show_warnings
from layerprobe.cli.options import model_argument, with_settings
from layerprobe.commands.heal import COMMAND
from layerprobe.config import HealConfig, ModelOptions


@with_settings(HealConfig, skip=("model.device_map", "model.offload", "model.quantize"), helps={
    "data.tokens": "Held-out token positions: the first of the corpus, scored before and after, never trained on "
                   "(default 4096).",
    "data.batch_size": "Sequences per training step (default 4).",
    "data.seq_len": "Packed sequence length (default 256)."}, arguments={"model": "model.model"})
def heal(
    model: str = model_argument("Also a folder `layerprobe export` wrote (its removal is healed); default with "
                                "--from-curve: the curve run's model."),
    given: dict | None = None,
) -> None:
    """Recover what removing layers cost: LoRA, the tail, or linear replacement of the removed blocks.

    LoRA (peft), the LM head and last kept blocks, or one linear map per removed run folded into the block before it
    (--method lstsq|cosine, no training) on the model without the chosen layers; held-out ppl and kl before and
    after."""
    from layerprobe.cli.common import fail
    from layerprobe.commands.probe import refuse_ranges_early
    from layerprobe.removal import REMOVAL_FILE

    base = HealConfig(model=ModelOptions(model=None)) if given.get("from_curve") else None
    config, _ = resolve_settings(COMMAND, given, base=base)
    if config.model.model is None and config.from_curve is None:
        raise fail("No MODEL given: pass the model to heal (or --from-curve RUN, which names it).")
    if config.remove and not config.from_curve and not (Path(config.model.model) / REMOVAL_FILE).is_file():
        call(refuse_ranges_early, config.model, remove=config.remove)  # in a moment, before torch is imported
    from layerprobe.cli.export import show_gain
    from layerprobe.commands.heal.read import change_text
    from layerprobe.commands.heal.run import run_heal
    with progress_bar() as progress:
        run = call(run_heal, config, progress)
    show_warnings(run.warnings)
    s = run.summary
    before, after = s["heldout_before"], s["heldout_after"]
    method = s.get("method", "lora")
    how = (f"{s['objective']} objective, {s['steps']} steps" if method in ("lora", "tail") else
           f"{s['train_tokens']} calibration tokens")
    out.print(f"healed {s['model']} without {s['removed']} ({s['num_layers_healed']} of {s['num_layers']} layers "
              f"left) by {method}, {how}, {s['repair_seconds']:.1f} s: held-out ppl {before['ppl']:.4g} -> "
              f"{after['ppl']:.4g} (unpruned {s['heldout_unpruned_ppl']:.4g}), kl {before['kl']:.4g} -> "
              f"{after['kl']:.4g}", highlight=False)
    said = change_text(s.get("heldout_change"))
    if said:
        out.print(said, highlight=False)
    if s["gain"]:
        show_gain(s["gain"], s["device"])
    kept = f"adapter {run.folder / s['adapter']}; " if s.get("adapter") else (
        f"maps {run.folder / s['transform']}; " if s.get("transform") else "")
    merged = (f"merged checkpoint {run.folder / s['merged']} ({s['merged_bytes'] / 1e6:,.0f} MB)" if s.get("merged")
              else "no merged checkpoint (--no-merged)")
    out.print(f"{kept}{merged} -> [bold]{run.folder}[/bold]", highlight=False)
