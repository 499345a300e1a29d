"""How report and compare read a dummy run: the functions its record's Kind names as 'module:function', as a
built-in command's record names its package's read.py."""

from __future__ import annotations

from typing import Any

from layerprobe.runs.compare import Check, Comparison, outside, same_keys
from layerprobe.runs.read import Run


def findings(run: Run) -> list[str]:
    return [f"The largest number is {run.tables['dummy']['value'].max():g}."]


def table(run: Run) -> Any:
    return run.tables["dummy"]


def comparer(old: Run, new: Run, tolerance: dict, into: Comparison, name: str) -> None:
    a, b = old.tables["dummy"].set_index("layer")["value"], new.tables["dummy"].set_index("layer")["value"]
    same_keys(a.index, b.index, "dummy.csv")
    for layer, value in a.items():
        delta = float(b[layer]) - float(value)
        into.checks.append(Check(name, "dummy value", f"layer {layer}", float(value), float(b[layer]), delta,
                                 tolerance["angular"], outside(float(value), float(b[layer]), delta, tolerance["angular"])))
