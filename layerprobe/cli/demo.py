"""`layerprobe demo`: the three measurements on embedded defaults, offline, and their report."""

from __future__ import annotations

from pathlib import Path

import typer

from layerprobe.cli.common import call, out, progress_bar, show_warnings
from layerprobe.config import DEMO_OUT, DEMO_REFERENCE


# A --quick run has fewer tokens and seeds than the committed reference: the tolerances it passes with (README).
QUICK_TOLERANCES = {"angular": 0.03, "prune": 0.25, "gradnorm": 0.5, "variance": 0.5}


def demo(
    out_dir: str = typer.Option(DEMO_OUT, "--out", show_default=False,
                                help=f"Demo folder (default {DEMO_OUT}; a timestamped sibling if it exists)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer tokens, one seed: seconds instead of minutes."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier demo in --out (only the files "
                                   "it wrote; a folder holding others is refused)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted demo in --out: finished sub-runs "
                                "are checked and kept, an unfinished one continues from its last save."),
) -> None:
    """Run every measurement offline on three real models, write one report and compare it with the committed one.

    Post-LN MiniLM, Pre-LN SmolLM2 and Peri-LN Gemma 3 (real weights): angular + pruning sweeps; llama-71m
    gradnorm for pre/post/mix/lns; one HTML report."""
    from layerprobe.commands.demo import run_demo
    from layerprobe.report.findings import findings
    from layerprobe.runs.read import load_run

    with progress_bar() as progress:
        result = call(run_demo, out_dir, quick, overwrite, progress, resume=resume)
    for folder in result.kept:
        out.print(f"kept (finished before, settings checked): {folder}", highlight=False, soft_wrap=True)
    for part in result.runs:
        show_warnings(part.warnings)
        run = call(load_run, part.folder)
        out.print(f"[bold]{run.command}[/bold] ({run.label})")
        for line in findings(run):
            out.print(f"  - {line}", highlight=False)
    out.print(f"report -> [bold]{result.report}[/bold]", highlight=False)
    reference = Path(DEMO_REFERENCE)
    if reference.is_dir() and reference.resolve() != Path(result.folder).resolve():
        loose = " ".join(f"--tolerance {k}={v:g}" for k, v in QUICK_TOLERANCES.items()) if quick else ""
        out.print(f"check against the committed reference: layerprobe compare {DEMO_REFERENCE} {result.folder} {loose}"
                  .rstrip(), highlight=False, soft_wrap=True)
