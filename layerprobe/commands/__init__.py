"""One module or package per command: validate -> load -> measure -> write; and COMMANDS, the one table of them.

Each command is one `Command` record: its name, its Typer command (cli/), its library function and public name,
its settings class, and how its runs are read back (a `runs.kinds.Kind`: tables, plot, findings, per-layer table,
comparer) with its summary keys and CSV columns. The CLI registers its commands from COMMANDS, `layerprobe.<name>`
is built from it, and `register` adds a new command's Kind, summary keys and columns to the run readers' registries
(runs/kinds.py, runs/schema.py, runs/columns.py), so `report`, `compare` and docs/outputs.md read its runs.

A new command is its own module or package plus one `register(Command(...))` line below. Functions are named as
'module:function' (imported on first use: `layerprobe --help` never loads torch, and the library never imports
cli/); a record may hold the functions themselves instead. tests/unit/test_commands.py resolves every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from layerprobe.config import (AngularConfig, CurveSettings, ExportConfig, GradnormConfig, HealConfig, MonitorSettings,
                               PruneConfig, ToyConfig)
from layerprobe.evaluation.variants import shard_suffix
from layerprobe.runs.folder import slug
from layerprobe.runs.kinds import KINDS, Kind, resolve_ref


@dataclass(frozen=True)
class Command:
    """Everything a command is, in one place."""

    name: str  # the CLI's word and the run folders' "command"
    cli: str | Callable | None = None  # the Typer command (cli/<name>.py); None: library only (prune --curve)
    run: str | Callable | None = None  # the library function, public as layerprobe.<api>
    api: str | None = None  # its public name (default: name)
    settings: type | None = None  # its settings dataclass, public by its class name
    kind: Kind | None = None  # how report and compare read its runs; None: it writes no run folder of its own
    summary: tuple = ()  # runs.schema.Key records of its summary.json (a built-in's are in runs/schema.py)
    tables: dict[str, tuple] = field(default_factory=dict)  # CSV file -> runs.columns.Column records
    exports: dict[str, str] = field(default_factory=dict)  # more public names -> 'module:attribute'
    folder: Callable[[Any], str] | None = None  # (settings) -> its run folder's own name: under reports/<model>/ by
    # default, under a [tool.layerprobe] out (the CLI), with the model in front in the demo

    def out(self, config: Any, model: str | None) -> str:
        """Where a run writes: its --out, else reports/<model>/<folder> (reports/<folder> without a model)."""
        if config.out:
            return config.out
        return str(Path("reports") / slug(model) / self.folder(config)) if model else str(Path("reports") /
                                                                                          self.folder(config))

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


COMMANDS: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add a command to COMMANDS and its run format to the readers' registries (a built-in's is there already)."""
    COMMANDS[command.name] = command
    if command.kind is not None:
        KINDS.setdefault(command.kind.name, command.kind)
    if command.summary:
        from layerprobe.runs.schema import SUMMARIES  # here: `python -m layerprobe.runs.schema` runs it as __main__

        SUMMARIES.setdefault(command.name, tuple(command.summary))
    if command.tables:
        from layerprobe.runs.columns import TABLES

        for table, columns in command.tables.items():
            TABLES.setdefault(table, tuple(columns))
    return command


def _named(name: str) -> Callable[[Any], str]:
    """A run folder named by its command alone."""
    return lambda config: name


def _part(config: Any) -> str:
    return "" if config.part == "block" else f"-{config.part}"


def _prune_folder(config: PruneConfig) -> str:
    """prune-<task>[-attn|-mlp][-shard-K-of-N]."""
    return f"prune-{slug(config.task)}{_part(config)}{shard_suffix(config.shard)}"


def _curve_folder(config: PruneConfig) -> str:
    """curve-<task>[-attn|-mlp] (a curve takes no --shard)."""
    return f"curve-{slug(config.task)}{_part(config)}"


# In the order `layerprobe --help` lists them; library-only entries (curve, monitor) where they belong.
register(Command("angular", "layerprobe.cli.angular:angular", "layerprobe.commands.angular:run_angular",
                 settings=AngularConfig, kind=KINDS["angular"], folder=_named("angular")))
register(Command("prune", "layerprobe.cli.prune:prune", "layerprobe.commands.prune.run:run_prune",
                 settings=PruneConfig, kind=KINDS["prune"], folder=_prune_folder))
register(Command("curve", None, "layerprobe.commands.prune.curve:run_curve", settings=CurveSettings,
                 kind=KINDS["curve"], folder=_curve_folder))
register(Command("gradnorm", "layerprobe.cli.gradnorm:gradnorm", "layerprobe.commands.gradnorm.run:run_gradnorm",
                 settings=GradnormConfig, kind=KINDS["gradnorm"], folder=_named("gradnorm"),
                 exports={"TrainSettings": "layerprobe.config:TrainSettings"}))
register(Command("merge", "layerprobe.cli.merge:merge", "layerprobe.commands.prune.merge:merge_shards"))
register(Command("export", "layerprobe.cli.export:export", "layerprobe.commands.export:run_export",
                 settings=ExportConfig))
register(Command("heal", "layerprobe.cli.heal:heal", "layerprobe.commands.heal.run:run_heal", settings=HealConfig,
                 kind=KINDS["heal"], folder=_named("heal")))
register(Command("report", "layerprobe.cli.report:report"))
register(Command("compare", "layerprobe.cli.compare:compare", "layerprobe.runs.compare:compare_folders"))
register(Command("demo", "layerprobe.cli.demo:demo"))
register(Command("toy", "layerprobe.cli.toy:toy", "layerprobe.commands.toy:run_toy", settings=ToyConfig,
                 kind=KINDS["toy"], folder=_named("toy")))
register(Command("monitor", settings=MonitorSettings, kind=KINDS["monitor"], exports={
    "LayerMonitor": "layerprobe.integrations.monitor:LayerMonitor",  # during training: a plain loop
    "LayerprobeCallback": "layerprobe.integrations.hf_trainer:LayerprobeCallback"}))  # during training: HF Trainer
