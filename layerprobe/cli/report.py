"""`layerprobe report RUN...`: one self-contained HTML page and its Markdown twin."""

from __future__ import annotations

import typer

from layerprobe.cli.common import call, out


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
    out.print(f"{result.runs} run(s) -> [bold]{result.html}[/bold] and {result.markdown.name}", highlight=False)
