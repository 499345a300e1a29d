"""write_run: what every command ends with (CSVs, figures, summary.json, manifest.json), and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError
from layerprobe.runs.folder import release_run_dir, run_files, save_figure, write_csv, write_json
from layerprobe.runs.manifest import build_manifest
from layerprobe.runs.schema import check_summary, check_tables


@dataclass
class RunResult:
    """What a command produced: its folder (None on the non-writing ranks of a distributed run), tables by CSV
    stem, the summary and the warnings. `run.table` is the first table; `run.<stem>` any of them."""

    folder: Path | None
    tables: dict[str, Any] = field(default_factory=dict)  # CSV stem -> DataFrame, in the order written
    summary: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def table(self) -> Any:
        return next(iter(self.tables.values()), None)

    def __getattr__(self, name: str) -> Any:
        tables = self.__dict__.get("tables") or {}
        if name in tables:
            return tables[name]
        raise AttributeError(name)


def write_run(folder: Path, command: Any, *, tables: dict[str, Any], figures: dict[str, Any], summary: dict,
              config: Any, started: str, seconds: float, facts: dict, formats: tuple[str, ...] = ("png",),
              manifest_extra: dict | None = None, warnings: list[str] | None = None) -> RunResult:
    """Write each table as <stem>.csv, each figure as <stem>.<format>, then summary.json and manifest.json last
    (a folder with both is a finished run). `command` is the command's record (commands.Command: its name is the
    summary's and the manifest's "command"); `facts`, the run's facts about its model and corpus (Probe.facts and
    the sweep's), which the manifest repeats beside the settings. Every file is written atomically; the summary and every table are
    checked against the record (runs/schema.py) before anything is written."""
    if summary.get("command", command.name) != command.name:
        raise RunError(f"A {command.name} run's summary names the command '{summary['command']}': please report this; "
                       "write_run writes the record's name.")
    summary = check_summary(command.name, {"command": command.name, **summary})
    check_tables(command.name, tables)
    for stem, frame in tables.items():
        write_csv(folder / f"{stem}.csv", frame)
    for stem, figure in figures.items():
        save_figure(folder / stem, figure, formats)
    write_json(folder / "summary.json", summary)
    # what --overwrite and --resume may replace (check_owned); a report written into the folder is not the run's
    files = sorted({*run_files(folder, report=False), "manifest.json"})
    write_json(folder / "manifest.json", build_manifest(command.name, config.to_dict(), started, seconds, **facts,
                                                        **(manifest_extra or {}), files=files))
    release_run_dir(folder)  # finished: summary.json and manifest.json, no lock
    return RunResult(folder, dict(tables), summary, list(warnings if warnings is not None else summary.get("warnings", [])))
