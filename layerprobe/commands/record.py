"""The Command record and COMMANDS, the one table of them: what `layerprobe.commands` fills with the built-ins (each
package's record) and what `register` adds a new command to.

A record is declarations and light functions only (settings, folder naming, summary keys, CSV columns, its Kind):
reading it imports no torch, no numpy, no typer, so `layerprobe --help` and `import layerprobe` stay light. The
functions that do load them (the Typer command, the library run; the findings, per-layer tables, overlays and
comparers of the package's read.py) are named as 'module:function' and imported on first use (resolve_ref);
tests/unit/test_commands.py resolves every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from layerprobe.errors import ConfigError
from layerprobe.registry import Registry
from layerprobe.runs.columns import FILES, TABLES, Column, Table
from layerprobe.runs.folder import check_out_apart, slug
from layerprobe.runs.keys import SUMMARIES, Key
from layerprobe.runs.kinds import KINDS, Kind, resolve_ref


@dataclass(frozen=True)
class Command:
    """Everything a command is, in one place."""

    name: str  # the CLI's word and the run folders' "command"
    cli: str | Callable | None = None  # the Typer command (cli/<name>.py); None: library only (prune --curve)
    run: str | Callable | None = None  # the library function, public as layerprobe.<api>
    api: str | None = None  # its public name (default: name)
    settings: type | None = None  # its own settings dataclass, public by its class name (curve's: CurveSettings, the
    # --curve options; the class its run takes whole is config_class)
    kind: Kind | None = None  # how report and compare read its runs; None: it writes no run folder of its own
    summary: tuple = ()  # runs.keys.Key records of its summary.json, in the order docs/outputs.md lists them
    tables: dict[str, tuple | Table] = field(default_factory=dict)  # CSV file -> its runs.columns.Column records,
    # or a runs.columns.Table (a paragraph of its own in docs/outputs.md, or another file's columns)
    exports: dict[str, Any] = field(default_factory=dict)  # more public names -> the object, or 'module:attribute'
    folder: Callable[[Any], str] | None = None  # (settings) -> its run folder's own name: under reports/<model>/ by
    # default, under a [tool.layerprobe] out (the CLI)

    @property
    def config_class(self) -> type | None:
        """The class of the settings its run function takes, resolve_settings builds and its manifest's "config"
        holds: its Kind's (a curve's is PruneConfig, whose `curve` field holds the record's CurveSettings), else
        `settings`."""
        if self.kind is not None and self.kind.config_class is not None:
            return self.kind.config_class
        return self.settings

    def out(self, config: Any, model: str | None) -> str:
        """Where a run writes: its --out, else reports/<model>/<folder> (reports/<folder> without a model); never one
        of the inputs it reads, inside one or holding one (read_inputs; issue 47 rule 2)."""
        if config.out:
            out = config.out
        else:
            parent = Path("reports") / slug(model) if model else Path("reports")
            out = str(parent / self.folder(config))
        check_out_apart(out, read_inputs(config) | ({"the model": model} if model else {}))
        return out

    def function(self, attribute: str) -> Callable[..., Any]:
        """The function `cli` or `run` holds, imported first where it is named."""
        return resolve_ref(getattr(self, attribute))

    def public(self) -> dict[str, str | Callable]:
        """layerprobe.<name> -> what it is ('module:attribute' or the object), for the package's lazy exports."""
        found: dict[str, Any] = {}
        if self.run is not None:
            found[self.api or self.name] = self.run
        if self.settings is not None:
            found[self.settings.__name__] = self.settings
        return found | dict(self.exports)


def read_inputs(config: Any) -> dict[str, str | None]:
    """What a run reads from disk, by the name a message gives it: every setting that says where an input is read
    (settings.Mark.where: the model, the dataset, --include-path, --task-data, --angular ...) and --from-curve."""
    from layerprobe.settings import flag_of, walk, where_paths

    found: dict[str, str | None] = {}
    flags = {path: flag_of(f) for path, f, _ in walk(type(config))}
    for path in (*where_paths(type(config)), "from_curve"):
        value: Any = config
        for name in path.split("."):
            value = getattr(value, name, None)
        if isinstance(value, str) and value:
            what = "the model" if path.endswith("model.model") else f"the {flags.get(path) or path} input"
            for n, part in enumerate(value.split(",") if path.endswith("include_path") else [value]):
                found[what if not n else f"{what} #{n + 1}"] = part
    return found


COMMANDS: dict[str, Command] = Registry("command")


def _malformed(command: Any) -> str | None:
    """What is wrong with a record given to register, or None."""
    if not isinstance(command, Command):
        return f"takes a Command record (layerprobe.commands.Command), got {type(command).__name__} {command!r:.40}"
    fields = [("name", isinstance(command.name, str) and command.name.strip() != "", "a non-empty str"),
              ("cli", command.cli is None or isinstance(command.cli, str) or callable(command.cli),
               "'module:function', a function or None"),
              ("run", command.run is None or isinstance(command.run, str) or callable(command.run),
               "'module:function', a function or None"),
              ("settings", command.settings is None or isinstance(command.settings, type), "a dataclass or None"),
              ("kind", command.kind is None or isinstance(command.kind, Kind), "a runs.kinds.Kind or None"),
              ("summary", isinstance(command.summary, (tuple, list)) and all(isinstance(k, Key) for k in
                                                                             command.summary), "Key records"),
              ("tables", isinstance(command.tables, dict) and all(
                  isinstance(v, Table) or (isinstance(v, (tuple, list)) and all(isinstance(c, Column) for c in v))
                  for v in command.tables.values()), "CSV file -> Column records or a Table")]
    bad = next(((name, what) for name, ok, what in fields if not ok), None)
    if bad:
        return f"got a record whose {bad[0]} is {getattr(command, bad[0])!r:.40}, not {bad[1]}"
    return None


def register(command: Command) -> Command:
    """Add a command to COMMANDS and its run format (Kind, summary keys, CSV columns) to the registries the run
    readers use (runs/kinds.py, runs/keys.py, runs/columns.py): report, compare, load_run and docs/outputs.md. A
    malformed record, or a name another record holds (a built-in command included), is one line: nothing is
    replaced silently (registry.py)."""
    problem = _malformed(command)
    if problem:
        raise ConfigError(f"register {problem}.")
    COMMANDS.add(command.name, command)
    if command.kind is not None:
        KINDS.add(command.kind.name, command.kind)
    if command.summary:
        SUMMARIES.add(command.name, tuple(command.summary))
    for table, columns in command.tables.items():
        TABLES.add(table, columns if isinstance(columns, Table) else Table(tuple(columns)))
    if command.kind is not None:
        FILES[command.kind.name] = tuple(command.tables)
    return command


def freeze() -> None:
    """Freeze every registry (COMMANDS, KINDS, SUMMARIES, TABLES): no command added, replaced or removed after."""
    for registry in (COMMANDS, KINDS, SUMMARIES, TABLES):
        registry.freeze()


def named(name: str) -> Callable[[Any], str]:
    """A run folder named by its command alone."""
    return lambda config: name


def part_suffix(config: Any) -> str:
    """'' for whole blocks, -attn or -mlp for a sub-layer (prune --part, a curve's)."""
    return "" if config.part == "block" else f"-{config.part}"
