"""`layerprobe toy`: the residual-MLP depth model for every normalization placement."""

from __future__ import annotations

from rich.table import Table

from layerprobe.cli.common import call, out, progress_bar, resolve_settings
from layerprobe.cli.options import with_settings
from layerprobe.commands.toy import COMMAND
from layerprobe.config import ToyConfig


@with_settings(ToyConfig)
def toy(given: dict | None = None) -> None:
    """See how each normalization placement behaves with depth in a residual-MLP toy model, no checkpoint needed.

    Norm, 1 - cos, effective rank and gradient norm by depth, with power-law fits over the deep half."""
    config, _ = resolve_settings(COMMAND, given)  # a bad setting refused before torch loads
    from layerprobe.commands.toy.run import run_toy

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
