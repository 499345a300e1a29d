"""`layerprobe toy`: the residual-MLP depth model for every normalization placement."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli import options as o
from layerprobe.cli.common import call, given, fail, out, parse_formats, progress_bar


def toy(
    norm: str = typer.Option(None, "--norm", help="Placements: pre, post, mix, lns, deepnorm, sandwich (default "
                             "pre,post,mix,lns)."),
    depth: int = typer.Option(None, "--depth", help="Residual blocks (default 100)."),
    width: int = typer.Option(None, "--width", help="Hidden size (default 256)."),
    alpha: str = typer.Option(None, "--branch-scale", help="alpha, the scale of FC2 (each block's update against its "
                              "input), or several: 0.5,1,2 (default 1.0); toy.csv's alpha column."),
    alpha_alias: str = typer.Option(None, "--alpha", hidden=True),  # the old name, kept for existing scripts
    samples: int = typer.Option(None, "--samples", help="i.i.d. Gaussian inputs (default 4096)."),
    seed: int = typer.Option(None, "--seed", help="Seed of weights and inputs (default 0)."),
    mix_alpha: float = typer.Option(None, "--mix-alpha", help="Mix-LN: fraction of Post-LN blocks, in [0, 1] (default 0.25)."),
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/toy)."),
    overwrite: bool = o.Overwrite,
    formats: str = o.Formats,
) -> None:
    """Norm, 1 - cos, effective rank and gradient norm by depth, with power-law fits over the deep half."""
    from layerprobe.commands.toy import run_toy
    from layerprobe.config import ToyConfig, find_project_config

    project, _ = call(find_project_config)
    out_dir = out_dir or (f"{project['out']}/toy" if "out" in project else None)
    d = ToyConfig()  # the defaults
    alpha = alpha if alpha is not None else alpha_alias
    try:
        alphas = tuple(float(a) for a in alpha.split(",") if a.strip()) if alpha is not None else d.alphas
    except ValueError:
        raise fail(f"--branch-scale '{alpha}' is not a list of numbers, e.g. 0.5,1,2.") from None

    norms = tuple(n.strip() for n in norm.split(",") if n.strip()) if norm is not None else d.norms
    config = ToyConfig(norms, given(depth, d.depth), given(width, d.width), alphas, given(samples, d.samples),
                       given(seed, d.seed), given(mix_alpha, d.mix_alpha), out_dir, overwrite, parse_formats(formats))
    with progress_bar() as progress:
        run = call(run_toy, config, progress)
    table = Table(title="Log-log slope over the deep half (95% interval); Pre-LN random walk: norm +0.5, 1-cos -1")
    for column in ("placement", "alpha", "||h_l||", "1 - cos(h_l, h_l+1)", "grad norm"):
        table.add_column(column, justify="right")

    def fmt(fit):
        return "-" if not fit else f"{fit['slope']:+.2f} [{fit['ci_low']:+.2f}, {fit['ci_high']:+.2f}]"

    for name, by_alpha in run.summary["fits"].items():
        for key, f in by_alpha.items():
            table.add_row(name, key.split("=")[1], fmt(f["hidden_norm"]), fmt(f["one_minus_cos_next"]), fmt(f["grad_norm"]))
    out.print(table)
    out.print(f"{run.summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]", highlight=False)
