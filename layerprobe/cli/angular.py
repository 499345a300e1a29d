"""`layerprobe angular MODEL`: angular distance between block inputs, heatmap + CSV."""

from __future__ import annotations

from rich.table import Table

from layerprobe.cli.common import call, out, progress_bar, resolve_settings, show_warnings
from layerprobe.cli.options import model_argument, with_settings
from layerprobe.commands.angular import COMMAND
from layerprobe.config import AngularConfig


@with_settings(AngularConfig, arguments={"model": "model.model"})
def angular(
    model: str = model_argument("Default minilm, unless [tool.layerprobe] names one."),
    given: dict | None = None,
) -> None:
    """Find the blocks that barely change their input, by the angular distance between block inputs.

    d(x_l, x_{l+n}) = arccos(cos)/pi for every start l and block size n, in one pass; small = prunable."""
    config, _ = resolve_settings(COMMAND, given)  # a bad setting refused before torch and the model load
    from layerprobe.commands.angular.run import run_angular

    with progress_bar() as progress:
        run = call(run_angular, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 reports
    show_warnings(run.warnings)
    summary = run.summary
    table = Table(title="Most prunable blocks: smallest d(x_l, x_l+n) per n")
    for column in ("n", "layers", "distance"):
        table.add_column(column, justify="right")
    for row in summary["prune_first"][: config.top]:
        table.add_row(str(row["n"]), row["layers"], f"{row['distance']:.4f}")
    out.print(table)
    out.print(
        f"{summary['num_layers']} layers ({summary['layers_path']}), {summary['tokens']:,} tokens, "
        f"{summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]",
        highlight=False,
    )
