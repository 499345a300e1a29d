"""`layerprobe angular MODEL`: angular distance between block inputs, heatmap + CSV."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli import options as o
from layerprobe.cli.common import call, out, parse_formats, progress_bar, show_warnings
from layerprobe.config import AngularConfig, DataOptions, ModelOptions


def angular(
    model: str = typer.Argument("minilm", help="Hub id, local folder, or 'minilm' (embedded all-MiniLM-L6-v2)."),
    dataset: str = o.Dataset,
    text_field: str = o.TextField,
    tokens: int = o.Tokens,
    seq_len: int = o.SeqLen,
    batch_size: int = o.BatchSize,
    positions: str = typer.Option("all", "--positions", help="all tokens, or the last token of each sequence."),
    dtype: str = o.Dtype,
    device: str = o.Device,
    revision: str = o.Revision,
    trust_remote_code: bool = o.TrustRemoteCode,
    layers_path: str = o.LayersPath,
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/<model>/angular)."),
    overwrite: bool = o.Overwrite,
    formats: str = o.Formats,
    top: int = typer.Option(8, "--top", help="Block sizes shown in the terminal table."),
) -> None:
    """Angular distance d(x_l, x_{l+n}) = arccos(cos)/pi between block inputs, for every l and n."""
    from layerprobe.angular import run_angular

    config = AngularConfig(
        model=ModelOptions(model, dtype, device, revision, trust_remote_code, layers_path),
        data=DataOptions(dataset, text_field, tokens, seq_len, batch_size),
        positions=positions,
        out=out_dir,
        overwrite=overwrite,
        formats=parse_formats(formats),
        top=top,
    )
    with progress_bar() as progress:
        run = call(run_angular, config, progress)
    show_warnings(run.warnings)
    summary = run.summary
    table = Table(title="Most prunable blocks: smallest d(x_l, x_l+n) per n")
    for column in ("n", "layers", "distance"):
        table.add_column(column, justify="right")
    for row in summary["prune_first"][:top]:
        table.add_row(str(row["n"]), row["layers"], f"{row['distance']:.4f}")
    out.print(table)
    out.print(
        f"{summary['num_layers']} layers ({summary['layers_path']}), {summary['tokens']:,} tokens, "
        f"{summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]",
        highlight=False,
    )
