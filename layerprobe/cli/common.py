"""What every command shares: option types, error handling, progress bars, tables."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from layerprobe.errors import LayerprobeError

console = Console(stderr=True)
out = Console()
T = TypeVar("T")

EXIT_USAGE = 2


def fail(message: str) -> typer.Exit:
    settle()
    if os.environ.get("RANK", "0") == "0":  # distributed runs: rank 0 says it, every rank exits non-zero
        console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    else:
        import time

        time.sleep(2)  # torchrun stops every rank once one exits: give rank 0 the time to say why
    return typer.Exit(EXIT_USAGE)


def offline_command(exc: Exception) -> str:
    """For a hub dataset that cannot be reached, the user's own command line with --dataset builtin in place."""
    from layerprobe.errors import HubDatasetUnavailable

    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    hub = any(isinstance(e, HubDatasetUnavailable) for e in (exc, *getattr(exc, "problems", ())))
    if not hub or program not in ("layerprobe", "__main__.py"):
        return ""  # not a command line (the library, a test runner): nothing exact to show
    import shlex

    words, kept = sys.argv[1:], []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--dataset":
            skip = True
        elif not word.startswith("--dataset="):
            kept.append(word)
    return f" Offline: {shlex.join(['layerprobe', *kept, '--dataset', 'builtin'])}"


def resume_line(folder: Any) -> str | None:
    """The command line that continues the run in `folder`: the user's own words, --overwrite, --resume and --out
    dropped, then `--resume --out FOLDER`. None where there is no command line (a library call) or the command has
    no --resume."""
    import shlex

    from layerprobe.cli.argv import COMMAND_LINE

    words = COMMAND_LINE.get("words")
    if words is None or not COMMAND_LINE.get("resumes"):
        return None
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif word not in ("--overwrite", "--resume") and not word.startswith("--out="):
            kept.append(word)
    return shlex.join(["layerprobe", *kept, "--resume", "--out", str(folder)])


def _outermost(folders: list) -> list:
    """The folders not inside another of them: a demo's sub-run continues with the demo."""
    from pathlib import Path

    resolved = [Path(f).resolve() for f in folders]
    return [f for f, r in zip(folders, resolved) if not any(o != r and o in r.parents for o in resolved)]


def interrupted_text() -> str:
    """What Ctrl-C left: each unfinished run folder (the outermost: a demo, not its sub-run), whether work was saved
    there, and the exact command that continues it in that folder (after a redirect to a timestamped sibling, the
    sibling)."""
    from layerprobe.runs.folder import abandon_run_dirs, unstarted_run_dirs

    kept = _outermost(abandon_run_dirs(interrupted=True))
    empty = set(unstarted_run_dirs())
    if not kept:
        return "nothing was written (stopped before the run folder was claimed): run the same command again."
    parts = []
    for folder in kept:
        line = resume_line(folder)
        what = "nothing was saved yet" if folder in empty else "finished work is kept"
        if line is not None:
            parts.append(f"{what} in {escape(str(folder))}; `{escape(line)}` continues it there")
        elif _has_cli():
            parts.append(f"{what} in {escape(str(folder))}; this command has no --resume: run it again (a new "
                         f"folder), or with --overwrite --out {escape(str(folder))} to replace it")
        else:
            parts.append(f"{what} in {escape(str(folder))}; the same call with resume=True and out="
                         f"{escape(repr(str(folder)))} continues it")
    return "; ".join(parts) + "."


def _has_cli() -> bool:
    from layerprobe.cli.argv import COMMAND_LINE

    return "words" in COMMAND_LINE


INTERRUPT_SAID = [False]  # call() printed the interrupt's line (cli/interrupt.py does not print it again)


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a library function; its typed errors become one red line and exit code 2."""
    from layerprobe.runs.folder import abandon_run_dirs

    try:
        return fn(*args, **kwargs)
    except LayerprobeError as exc:
        abandon_run_dirs()
        raise fail(str(exc) + offline_command(exc)) from None
    except KeyboardInterrupt:
        settle()
        INTERRUPT_SAID[0] = True  # the one line: cli/interrupt.py prints it for an interrupt outside this call
        console.print(f"[yellow]interrupted[/yellow]: {interrupted_text()}", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    finally:
        settle()  # a phase the call announced ends with it: its line never lands in later output


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[str, int, int], None]]:
    """Progress driven by the library's (stage, done, total) callback: a rich bar on a terminal, plain lines in a
    CI log or a pipe (LogProgress)."""
    if not sys.stderr.isatty():
        yield LogProgress()
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    tasks: dict[str, Any] = {}
    with Progress(*columns, console=console, transient=False) as bar:

        def update(stage: str, done: int, total: int) -> None:
            settle()
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


class PhaseLines(logging.Handler):
    """The library's phase announcements (progress.announce) as plain lines on stderr, above a live bar: each shown
    only once its phase has lasted PHASE_AFTER seconds (a quick load says nothing, and an error stays one line)."""

    pending: threading.Timer | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if os.environ.get("RANK", "0") != "0":
            return
        settle()
        line = f"[dim]{escape(record.getMessage())}[/dim]"
        timer = threading.Timer(PHASE_AFTER, lambda: console.print(line, highlight=False, soft_wrap=True))
        timer.daemon = True
        PhaseLines.pending = timer
        timer.start()


PHASE_AFTER = 2.0  # seconds a phase runs before its line shows


def settle() -> None:
    """The phase announced last is over (progress began, another phase, an error): its line is not shown late; on an
    error (or the command's end) no stage's start line either (LogProgress)."""
    end_phase()
    for timer in LogProgress.starting.values():
        timer.cancel()
    LogProgress.starting.clear()


def end_phase() -> None:
    """The phase announced last is over: its line is not shown late."""
    if PhaseLines.pending is not None:
        PhaseLines.pending.cancel()
        PhaseLines.pending = None


def show_phases() -> None:
    """Route progress.announce's records to the terminal or log, and progress.notice's at once (once per process)."""
    from layerprobe.progress import NOTICES, PHASES

    logger = logging.getLogger(PHASES)
    if not any(isinstance(h, PhaseLines) for h in logger.handlers):
        logger.addHandler(PhaseLines())
        logger.setLevel(logging.INFO)
        logger.propagate = False
    notices = logging.getLogger(NOTICES)
    if not any(isinstance(h, NoticeLines) for h in notices.handlers):
        notices.addHandler(NoticeLines())
        notices.propagate = False


class NoticeLines(logging.Handler):
    """progress.notice's records: a yellow 'note:' line on stderr, at once."""

    def emit(self, record: logging.LogRecord) -> None:
        if os.environ.get("RANK", "0") == "0":
            settle()
            console.print(f"[yellow]note[/yellow]: {escape(record.getMessage())}", highlight=False, soft_wrap=True)


class LogProgress:
    """Plain progress lines for logs: one when a stage has lasted `start_after` seconds without a line (so a log
    shows a slow phase from its start, not only once its first item is done), one at its first progress, one when
    it ends, and one at least every `every` seconds in between, with done/total, the rate and the time left. (A run
    that fails before any progress prints only its error.)"""

    def __init__(self, every: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None, start_after: float | None = None) -> None:
        self.every, self.clock = every, clock
        self.start_after = PHASE_AFTER if start_after is None else start_after
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.stages: dict[str, tuple[float, int]] = {}  # stage -> (start time, done at start)
        self.last: dict[str, float | None] = {}  # stage -> when its last line was written (None: not yet)

    starting: dict[str, threading.Timer] = {}  # stage -> its pending start line (settle cancels them all)

    def __call__(self, stage: str, done: int, total: int) -> None:
        end_phase()
        pending = LogProgress.starting.pop(stage, None)
        if pending is not None:
            pending.cancel()
        now = self.clock()
        if stage not in self.stages:
            self.stages[stage], self.last[stage] = (now, done), None
            if done < total:  # said once the stage lasts; its next call, or an error (settle), cancels it
                line = f"{stage}: {done:,}/{total:,} {'started' if done == 0 else 'resumed'}"
                timer = threading.Timer(self.start_after, lambda: self.write(line))
                timer.daemon = True
                LogProgress.starting[stage] = timer
                timer.start()
            return
        start, first = self.stages[stage]
        last = self.last[stage]
        if done >= total or (last is None and done > first) or (last is not None and now - last >= self.every):
            self.last[stage] = now
            elapsed = max(now - start, 1e-9)
            rate = (done - first) / elapsed
            left = f", eta {_clock(int((total - done) / rate))}" if rate > 0 and done < total else ""
            state = "done" if done >= total else f"{100 * done / max(total, 1):.0f}%"
            self.write(f"{stage}: {done:,}/{total:,} {state} after {_clock(int(elapsed))}, {_rate(rate)}{left}")


def _rate(per_second: float) -> str:
    """'1,234.5/s', or for a slow stage the seconds each item takes ('42.0 s each'), never '0.0/s'."""
    if per_second >= 1 or per_second <= 0:
        return f"{per_second:,.1f}/s"
    return f"{1 / per_second:,.1f} s each"


def _clock(seconds: int) -> str:
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def resolve_settings(command: Any, given: dict, base: Any = None,
                     project_file: tuple[dict, Any] | None = None) -> tuple[Any, dict]:
    """The settings of `command` (its record, commands.Command: the class its run takes, Command.config_class) from
    what the user gave (settings.resolve: CLI > LAYERPROBE_<NAME> > [tool.layerprobe] > default); a project `out` is
    the parent of the run folder the record names from the settings (Command.folder), given as --out would be.
    project_file: config.find_project_config's (table, path) where the command read it already (prune: its task),
    so the file is read once. Returns (settings, {dotted name: where its value came from})."""
    from layerprobe.config import find_project_config
    from layerprobe.settings import resolve

    cls = command.config_class
    project, path = project_file if project_file is not None else call(find_project_config)
    config, sources = call(resolve, cls, given, project, base, project_file=path)
    if config.out is None and command.folder is not None and "out" in project:
        given = {**given, "out": f"{project['out']}/{call(command.folder, config)}"}
        config, sources = call(resolve, cls, given, project, base, project_file=path)
    return config, sources


def show_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def parse_formats(value: str) -> tuple[str, ...]:
    formats = tuple(f.strip().lower() for f in value.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad or not formats:
        raise fail(f"Unknown plot format '{','.join(bad) or value}': use png, svg, pdf (comma-separated).")
    return formats
