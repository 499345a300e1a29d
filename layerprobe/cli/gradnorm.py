"""`layerprobe gradnorm`: per-layer gradient norms at initialization, per normalization placement."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli.common import call, out, progress_bar, resolve_settings, show_warnings
from layerprobe.cli.options import given_any, with_settings
from layerprobe.commands.gradnorm import COMMAND
from layerprobe.config import GradnormConfig


@with_settings(GradnormConfig, skip=("model.dtype", "model.device", "model.quantize", "data.tokens"),
               arguments={"model": "model.model"})
def gradnorm(
    model: str = typer.Argument(None, help="A checkpoint (as it is, or --reinit); default: the in-house family.",
                                show_default=False),
    given: dict | None = None,
) -> None:
    """Compare normalization placements by how gradients and activations scale with depth.

    Gradient norm of every block (parameters, input) and its output variance at init or after --steps, per
    placement."""
    from layerprobe.cli.common import fail

    if model is None:
        stray = given_any(given, "model") + (["reinit"] if given.get("reinit") else [])
        if stray:
            flags = ", ".join("--" + name.split(".")[-1].replace("_", "-") for name in stray)
            raise fail(f"{flags}: only with a checkpoint. Pass MODEL, or drop {flags} for the in-house family.")
        given = {**given, "model": None}
    config, _ = resolve_settings(COMMAND, given)  # a bad setting refused before torch and the model load
    from layerprobe.commands.gradnorm.run import run_gradnorm

    with progress_bar() as progress:
        run = call(run_gradnorm, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 reports
    show_warnings(run.warnings)
    table = Table(title="Last third of layers over first third (at the first recorded step)")
    table.add_column("placement")
    for column in ("params grad", "input grad", "output variance"):
        table.add_column(column, justify="right")
    losses = run.summary.get("final_loss", {})
    if losses:
        table.add_column(f"loss @ {run.summary['steps']}", justify="right")
    for name, info in run.summary["placements"].items():
        fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        cells = [fmt(info["params_late_over_early"]), fmt(info["input_late_over_early"]),
                 fmt(info["variance_late_over_early"])]
        table.add_row(name, *cells, *([fmt(losses.get(name))] if losses else []))
    out.print(table)
    out.print(f"{run.summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]", highlight=False)
