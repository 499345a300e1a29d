"""A command added through its record alone (tests/unit/test_commands.py): this package and one register() line.

`layerprobe dummy --value 3` writes dummy.csv (value x layer and its square for 4 layers), dummy.png and
summary.json; report and compare read its runs through its Kind, whose findings, table and comparer live in read.py,
named from the record as 'module:function' (the built-ins' way); docs/outputs.md lists its keys and columns.

It also adds, each by its record and its own function here alone (tests/unit/test_records_added.py,
tests/test_added_metric.py; tests/test_source_scans.py finds no module of layerprobe naming them): a column of
dummy.csv (SQUARED: its Column in the record, its value in run_dummy), a task-free prune metric (METRIC: `prune
--task absdiff`, one register_metric line) and a removal strategy of `prune --curve` (STRATEGY: `--strategies front`,
one register_strategy line). No module of layerprobe names any of them."""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, asdict, dataclass

from layerprobe.cli.common import call, out, resolve_settings
from layerprobe.cli.options import with_settings
from layerprobe.commands import Command
from layerprobe.evaluation.metric import Metric
from layerprobe.progress import silent
from layerprobe.runs.columns import Column, Table
from layerprobe.runs.folder import prepare_run_dir
from layerprobe.runs.kinds import Kind
from layerprobe.runs.manifest import start_time
from layerprobe.runs.schema import RUN, Key
from layerprobe.runs.write import write_run
from layerprobe.settings import setting, takes
from layerprobe.strategies import Strategy


@dataclass
class DummyConfig:
    """`layerprobe dummy`."""

    value: float = setting(1.0, above=0, help="The slope of every layer's number.")
    _: KW_ONLY
    out: str = setting("dummy-run", numbers=False, flag="--out", help="Run folder.")
    overwrite: bool = setting(False, numbers=False, help="Replace an earlier dummy run.")

    def to_dict(self) -> dict:
        return asdict(self)


@takes(DummyConfig, "layerprobe.dummy")
def run_dummy(config: DummyConfig, progress=silent):
    import pandas as pd
    from matplotlib.figure import Figure

    started, clock = start_time(), time.perf_counter()
    folder = prepare_run_dir(config.out, config.overwrite, command=COMMAND)
    table = pd.DataFrame({"layer": range(4), "value": [config.value * layer for layer in range(4)]})
    table["squared"] = table["value"] ** 2  # the added column's value: its own code
    figure = Figure(figsize=(2, 1.5))  # small: a third of the default's drawing time, at write_run's 200 dpi
    figure.add_subplot().plot(table["layer"], table["value"])
    summary = {"seconds": 0.0, "warnings": [], "value": config.value}
    return write_run(folder, COMMAND, tables={"dummy": table}, figures={"dummy": figure}, summary=summary,
                     config=config, started=started, seconds=time.perf_counter() - clock, facts={})


@with_settings(DummyConfig)
def dummy(given: dict | None = None) -> None:
    """Write a dummy run: one number per layer."""
    config, _ = resolve_settings(COMMAND, given)
    run = call(run_dummy, config)
    out.print(f"-> {run.folder}")


SQUARED = Column("squared", "(value x l) squared")  # the added column: this line and its value in run_dummy


def absdiff_values(original, pruned, ids):
    """The added metric: mean |pruned - original| over the final hidden state's entries, per position, float64
    (sequences, positions)."""
    return (pruned.double() - original.output.double()).abs().mean(-1)


METRIC = Metric("absdiff", "base", "mean absolute change of the final hidden state's entries", absdiff_values,
                lambda baseline, keep: 1 - keep, zero_baseline=True)


def first_sets(choice):
    """The added strategy: the first k layers."""
    return {k: list(range(k)) for k in range(1, choice.k_max + 1)}


STRATEGY = Strategy("front", "the first k layers", "", "front: first n layers", "#8e44ad", "D", first_sets)

READ = f"{__name__}.read:"  # read.py: its findings, table and comparer, imported on first use
COMMAND = Command(
    "dummy", dummy, run_dummy, settings=DummyConfig,
    kind=Kind("dummy", (("dummy.csv", True),), "dummy.png", "Dummy numbers by layer", (("value", "value"),),
              READ + "findings", READ + "table", READ + "comparer", config_class=DummyConfig),
    summary=RUN + (Key("value", (int, float), "--value: the slope"),),
    tables={"dummy.csv": Table((Column("layer", "block l", key=True), Column("value", "value x l", always=True),
                                SQUARED), intro="One row per layer: the dummy's number."),
            "dummy-copy.csv": Table((Column("layer", "block l", key=True),), same_as="dummy.csv")})
