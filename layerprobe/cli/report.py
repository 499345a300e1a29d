"""`layerprobe report RUN...`: one self-contained HTML page and its Markdown twin."""

from __future__ import annotations

import typer

from rich.markup import escape

from layerprobe.cli.common import call, console, out


def report(
    runs: list[str] = typer.Argument(..., help="Run folders (or folders of runs) written by layerprobe."),
    out_dir: str = typer.Option(None, "--out", help="Where report.html and report.md go (default: the runs' common parent)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a report.html, report.md or report_files/ in "
                                   "--out that layerprobe did not write (its own earlier report is replaced without it)."),
) -> None:
    """Write one HTML page (and its Markdown twin) of figures and findings for one or more runs.

    Heatmaps, pruning bars, gradient-norm lines and plain-language findings, overlaid by relative depth."""
    from layerprobe.report.page import report_runs

    result = call(report_runs, runs, out_dir, overwrite)
    for folder, reason in result.skipped:
        console.print(f"[yellow]left out[/yellow] {escape(str(folder))}: {escape(reason)}", highlight=False,
                      soft_wrap=True)
    out.print(f"{result.runs} run(s) -> [bold]{result.html}[/bold] and {result.markdown.name}", highlight=False)
