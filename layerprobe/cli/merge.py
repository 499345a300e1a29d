"""`layerprobe merge RUN...`: join the run folders of `prune --shard K/N` into one sweep."""

from __future__ import annotations

import typer

from layerprobe.cli.options import option
from layerprobe.config import PruneConfig
from layerprobe.cli.common import call, parse_formats


def merge(
    runs: list[str] = typer.Argument(..., help="The run folders of every `layerprobe prune --shard K/N` of one sweep."),
    out_dir: str = typer.Option(None, "--out", help="Merged run folder (default: the shards' name without -shard-K-of-N)."),
    overwrite: bool = option(PruneConfig, "overwrite", False),
    formats: str = option(PruneConfig, "formats", "png"),
) -> None:
    """Join the run folders of a `prune --shard K/N` sweep into one run.

    Shards that disagree on model, task, settings or baseline are refused."""
    from layerprobe.cli.prune import show_prune
    from layerprobe.commands.prune.merge import merge_shards

    run = call(merge_shards, runs, out_dir, overwrite, parse_formats(formats))
    show_prune(run)
