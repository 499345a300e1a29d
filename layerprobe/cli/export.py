"""`layerprobe export MODEL --remove 20-27 --out DIR`: the pruned model as a plain transformers checkpoint."""

from __future__ import annotations

import typer

from layerprobe.cli.common import call, out, progress_bar, resolve_settings
from layerprobe.cli.options import with_settings
from layerprobe.config import ExportConfig, ModelOptions


@with_settings(ExportConfig, skip=("model.device_map", "model.offload", "model.quantize"), required=("out",))
def export(
    model: str = typer.Argument(None, help="Hub id, local folder, .gguf file, 'minilm' or 'smollm2' (embedded); "
                                "default with --from-curve: the curve run's model."),
    given: dict | None = None,
) -> None:
    """Save the model without the chosen layers: loads with plain from_pretrained, no layerprobe needed."""
    from layerprobe.cli.common import fail
    from layerprobe.commands.export import run_export

    given["model"]["model"] = model
    base = ExportConfig(model=ModelOptions(model=None)) if given.get("from_curve") else None  # the curve's model
    config, _ = resolve_settings(ExportConfig, given, base=base)
    if config.model.model is None and config.from_curve is None:
        raise fail("No MODEL given: pass the model to export (or --from-curve RUN, which names it).")
    with progress_bar() as progress:
        done = call(run_export, config, progress)
    gain = done["gain"]
    out.print(f"removed {done['removed_label']} ({done['part']}) of {done['num_layers_original']} layers -> "
              f"{done['num_layers_exported']} layers [bold]{done['out']}[/bold]", highlight=False)
    if gain:
        out.print(f"parameters {gain['parameters_exported']:,} of {gain['parameters_original']:,} "
                  f"({gain['parameter_ratio']:.1%}); time per token {gain['time_ratio']:.2f}x the original "
                  f"(batch {gain['timing_batch'][0]} x {gain['timing_batch'][1]}, median of {gain['timing_repeats']}, "
                  f"{done['device']})", highlight=False)
    if done["verified_max_difference"] is not None:
        out.print(f"verified: reloaded with {done['loads_with'].split('.from_pretrained')[0]}, largest output difference "
                  f"{done['verified_max_difference']:.2g}", highlight=False)
