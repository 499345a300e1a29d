"""Ctrl-C anywhere in a CLI run is one line and exit 130: inside a library call (cli/common.call says what was kept),
before it (parsing, settings, imports: typer alone would exit 130 in silence), and where the interrupt broke an
import half-way and surfaced as another exception (a RecursionError or ModuleNotFoundError from transformers)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

STATE = {"interrupted": False}  # an interrupt arrived (common.INTERRUPT_SAID: call() printed its line)


BEFORE = ("interrupted: nothing was written (stopped before the run folder was claimed): run the same command "
          "again.")


def _while_starting(signum: int, frame: Any) -> None:
    """Ctrl-C while the CLI's own modules import (before main): the line, and a quiet exit (SystemExit carries no
    traceback through the import that it stops)."""
    sys.stderr.write(BEFORE + "\n")
    raise SystemExit(130)


def on_start() -> None:
    """Run as the CLI starts (layerprobe/cli/__init__.py, first thing): not inside another program's process."""
    import os

    if os.path.basename(sys.argv[0]) in ("layerprobe", "__main__.py"):
        signal.signal(signal.SIGINT, _while_starting)


def _on_interrupt(signum: int, frame: Any) -> None:
    STATE["interrupted"] = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_said_once() -> Iterator[None]:
    """Around the app: remember a SIGINT (raised as Python's default handler does), and after it, whatever ends the
    run (typer's silent Exit(130), a KeyboardInterrupt, an exception an interrupted import left) prints the one
    line and exits 130."""
    previous = signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    except SystemExit as exc:
        from layerprobe.cli.common import INTERRUPT_SAID

        if STATE["interrupted"] and not INTERRUPT_SAID[0]:
            _say_and_exit()
        raise exc
    except BaseException:
        if not STATE["interrupted"]:
            raise
        _say_and_exit()
    finally:
        signal.signal(signal.SIGINT, previous)


def _say_and_exit() -> None:
    from layerprobe.cli.common import console, interrupted_text, settle

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the line short
    settle()
    console.print(f"[yellow]interrupted[/yellow]: {interrupted_text()}", highlight=False, soft_wrap=True)
    sys.exit(130)
