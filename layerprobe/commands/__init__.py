"""One package (or module) per command: validate -> load -> measure -> write; and COMMANDS, the one table of them.

Each command is one `Command` record (commands/record.py), kept in its own package's __init__.py: its name, its
Typer command (cli/), its library function and public name, its settings class, its run-folder name, its summary
keys and CSV columns, and how its runs are read back (a `runs.kinds.Kind`: tables, plot, findings, per-layer table,
comparer). The CLI registers its commands from COMMANDS, `layerprobe.<name>` is built from it, and `register` adds
each command's Kind, summary keys and columns to the registries the run readers use (runs/kinds.py, runs/keys.py,
runs/columns.py), so `report`, `compare`, `load_run` and docs/outputs.md read its runs. `import layerprobe`
imports this module, so every reader finds the built-ins registered.

A new command is its own package plus one `register(...)` line below.
"""

from __future__ import annotations

from layerprobe.commands import angular, gradnorm, heal, monitor, prune, toy
from layerprobe.commands.record import COMMANDS, Command, register
from layerprobe.config import ExportConfig

__all__ = ["COMMANDS", "Command", "register"]  # and the inline records EXPORT, DEMO

# In the order `layerprobe --help` lists them (and docs/outputs.md its records); library-only entries (curve,
# monitor) where they belong.
register(angular.COMMAND)
register(prune.PRUNE_COMMAND)
register(prune.CURVE_COMMAND)
register(gradnorm.COMMAND)
register(monitor.COMMAND)  # during training (layerprobe.integrations): no CLI command
register(prune.MERGE_COMMAND)
EXPORT = register(Command("export", "layerprobe.cli.export:export", "layerprobe.commands.export:run_export",
                 settings=ExportConfig))  # writes a checkpoint, not a run folder
register(heal.COMMAND)
register(Command("report", "layerprobe.cli.report:report"))
register(Command("compare", "layerprobe.cli.compare:compare", "layerprobe.runs.compare:compare_folders"))
DEMO = register(Command("demo", "layerprobe.cli.demo:demo"))
register(toy.COMMAND)
