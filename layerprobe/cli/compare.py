"""`layerprobe compare BASELINE NEW`: a CI verdict, exit 0 (within tolerance), 1 (regression), 2 (unusable)."""

from __future__ import annotations

import typer

from layerprobe.errors import RunError, check_path
from layerprobe.cli.common import call, fail
from layerprobe.runs.kinds import tolerance_help


def compare(
    baseline: str = typer.Argument(..., help="Baseline run folder (or folder of runs, e.g. a committed reports/demo)."),
    new: str = typer.Argument(..., help="New run folder of the same command (or folder of runs, paired by path)."),
    tolerance: list[str] = typer.Option(None, "--tolerance", help=tolerance_help()),
    fmt: str = typer.Option("text", "--format", show_default=False, help="text (default), markdown ($GITHUB_STEP_SUMMARY), json or junit."),
    output: str = typer.Option(None, "--out", help="Also write the verdict to this file."),
    output_alias: str = typer.Option(None, "--output", hidden=True),  # the old name, kept for existing CI scripts
    max_rows: int = typer.Option(50, "--max-rows", min=0, show_default=False, help="Offending entries listed (all are counted; default 50)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an --out file layerprobe did not write (an "
                                   "earlier verdict is replaced without it)."),
) -> None:
    """Give a CI verdict on two runs: exit 0 within tolerance, 1 on a regression, 2 on unusable input.

    Compares metric by metric, layer by layer, and names every entry outside tolerance."""
    from pathlib import Path

    from layerprobe.config import find_project_config
    from layerprobe.runs.compare import compare_folders, is_verdict, parse_tolerances, render
    from layerprobe.runs.folder import atomic_write_text, check_file_owned, check_not_in_run, check_out_apart

    output = output if output is not None else output_alias
    if output is not None:  # before anything is compared: a user's file there is never replaced
        call(check_path, output, "--out")
        call(check_out_apart, output, {"the baseline": baseline, "the new run": new})  # nor a file of either run
        call(check_not_in_run, output, "--out", is_verdict)  # nor a file of a third run, --overwrite or not
        call(check_file_owned, Path(output), is_verdict, "--out", overwrite)
    project, _ = call(find_project_config)
    tolerances = call(parse_tolerances, tolerance, project.get("tolerance"))
    given = [pair.partition("=")[0].strip() for pair in tolerance or []]  # named here: each must apply to the runs
    result = call(compare_folders, baseline, new, tolerances, given)
    text = call(render, result, fmt, max_rows)
    if output:
        try:
            atomic_write_text(Path(output), text if text.endswith("\n") else text + "\n")
        except RunError as exc:  # the file's folder is missing, a file, read-only or full
            raise fail(f"--out '{output}' cannot be written ({str(exc).split('(', 1)[-1].split(')')[0]}): pass a "
                       "writable file path.") from None
    typer.echo(text)
    raise typer.Exit(result.exit_code)
