"""Typer app: one module per command, registered from layerprobe.commands.COMMANDS; options build a config, one
library call does the work."""

from __future__ import annotations

import os

from layerprobe.cli.interrupt import on_start

on_start()  # Ctrl-C while the rest imports is one line too

import typer  # noqa: E402

from layerprobe.cli.options import SectionedCommand, SentenceGroup  # noqa: E402

HELP = ("Which layers of a transformer actually work: angular distance, pruning sweeps, gradient norms; reports and CI "
        "verdicts.")


def build_app() -> typer.Typer:
    """The Typer app with every command of COMMANDS that has a CLI, in the table's order."""
    from layerprobe.commands import COMMANDS

    built = typer.Typer(
        name="layerprobe",
        cls=SentenceGroup,
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # help texts are plain: "[tool.layerprobe]" and "layerprobe[eval]" print as written
    )
    for command in COMMANDS.values():
        if command.cli is not None:
            built.command(name=command.name, cls=SectionedCommand)(command.function("cli"))
    built.callback()(root)
    return built


def _version(value: bool) -> None:
    if value:
        from layerprobe import __version__

        typer.echo(f"layerprobe {__version__}")
        raise typer.Exit()


def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Which layers of a transformer actually work: angular distance, pruning sweeps, gradient norms; reports and CI verdicts."""
    from layerprobe.cli.common import show_phases

    quiet_libraries()
    show_phases()


app = build_app()


def quiet_libraries() -> None:
    """The CLI draws its own progress: no progress bars from transformers or the hub (set for this process, before
    transformers is imported where possible, so `--help` stays light)."""
    import sys

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TQDM_DISABLE", "1")  # lm-eval's and the GGUF reader's own bars
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def main() -> None:
    """The process-wide settings a CLI run wants (the library leaves them as it finds them), then the app."""
    from layerprobe.cli.memory import keep_freed_memory

    keep_freed_memory()  # CLI runs repeat large passes: reuse freed pages (see layerprobe/cli/memory.py)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MPLBACKEND", "Agg")  # figures are Figure objects; no window ever opens
    from layerprobe.cli.interrupt import interrupts_said_once

    with interrupts_said_once():
        app()
