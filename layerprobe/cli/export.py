"""`layerprobe export MODEL --remove 20-27 --out DIR`: the pruned model as a plain transformers checkpoint."""

from __future__ import annotations

import typer

from layerprobe.cli import options as o
from layerprobe.cli.common import call, out, progress_bar
from layerprobe.config import ExportConfig, ModelOptions


def export(
    model: str = typer.Argument(None, help="Hub id, local folder, .gguf file, 'minilm' or 'smollm2' (embedded); "
                                "default with --from-curve: the curve run's model."),
    remove: str = typer.Option(None, "--remove", help="Blocks to remove, 0-based, ranges inclusive: 20-27 removes 20 "
                               "through 27; 3,7,9-11."),
    part: str = typer.Option("block", "--part", show_default=False, help="block (default): the blocks go; attn or mlp: that sub-layer's "
                             "output projection is zeroed (same size, same outputs as prune --part)."),
    from_curve: str = typer.Option(None, "--from-curve", help="A `prune --curve` run folder: export a strategy's choice."),
    strategy: str = typer.Option("angular", "--strategy", show_default=False, help="--from-curve: angular (default), bi, greedy or last."),
    k: int = typer.Option(None, "--k", help="--from-curve: layers removed (default: the strategy's largest k within tolerance)."),
    out_dir: str = typer.Option(..., "--out", help="Folder for the exported checkpoint."),
    dtype: str = typer.Option("auto", "--dtype", show_default=False, help="auto (float32 on CPU, bfloat16 on GPU; default), float32, bfloat16, float16."),
    device: str = o.Device,
    revision: str = o.Revision,
    trust_remote_code: bool = o.TrustRemoteCode,
    layers_path: str = o.LayersPath,
    stack: str = o.Stack,
    gguf_file: str = o.GGUFFile,
    cache: bool = o.Cache,
    verify: bool = typer.Option(True, "--verify/--no-verify", show_default=False, help="Reload the export with plain transformers and "
                                "compare its outputs with the pruned model before finishing (default on)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out folder."),
) -> None:
    """Save the model without the chosen layers: loads with plain from_pretrained, no layerprobe needed."""
    from layerprobe.commands.export import run_export

    config = ExportConfig(
        model=ModelOptions(model, dtype, device, revision, trust_remote_code, layers_path, gguf_file=gguf_file,
                           cache=cache, stack=stack),
        remove=remove, part=part, from_curve=from_curve, strategy=strategy, k=k, out=out_dir, overwrite=overwrite,
        verify=verify,
    )
    if model is None and from_curve is None:
        from layerprobe.cli.common import fail

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
        out.print(f"verified: reloaded with transformers.{done['architecture']}, largest output difference "
                  f"{done['verified_max_difference']:.2g}", highlight=False)
