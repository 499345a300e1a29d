"""What `compare` gives back: Check (one number compared) and Comparison (all of them, the notes and the verdict's
exit code), and the few helpers every comparer builds checks with. Plain data: runs/compare.py walks the runs,
runs/compare_columns.py the declared columns, each command's read.py its own numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from layerprobe.errors import RunError


@dataclass
class Check:
    """One number compared."""

    run: str  # run path relative to the compared folder ('' for a single run)
    metric: str  # e.g. "angular d(l,n)", "dP acc", "baseline acc", "grad params", "variance"
    where: str  # e.g. "l=3 n=1", "layer 5", "pre layer 3"
    old: float
    new: float
    delta: float
    limit: float  # the allowed |delta| (absolute, already scaled)
    failed: bool
    interval: list | None = None  # [low, high]: the change's paired 95% interval from both runs' records, if any
    rule: str = "tolerance"  # what decided: "tolerance", or "tolerance and paired interval" (records on both sides)


@dataclass
class Comparison:
    baseline: str
    new: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tolerance: dict = field(default_factory=dict)
    untested: list[str] = field(default_factory=list)  # why records gave no paired interval (the verdict says)
    covered: dict = field(default_factory=dict)  # (run, CSV file) -> the columns its comparer judged itself (the
    # column walk, compare_columns.py, judges the rest), None: the whole file walked
    changed: dict = field(default_factory=dict)  # run -> the settings that differ between its two runs

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


def outside(old: float, new: float, delta: float, limit: float) -> bool:
    """A check fails when |delta| exceeds its limit, or when either side is NaN or infinite (a NaN compares
    false with everything, so `abs(delta) > limit` alone would pass it)."""
    return not (math.isfinite(old) and math.isfinite(new)) or abs(delta) > limit


def relative(into: Comparison, name: str, metric: str, where: str, old: float, new: float, tol: float) -> None:
    limit = tol * abs(old)
    into.checks.append(Check(name, metric, where, old, new, new - old, limit, outside(old, new, new - old, limit)))


def same_keys(a: Any, b: Any, what: str) -> None:
    if set(a) != set(b):
        missing, extra = sorted(set(a) - set(b), key=str)[:3], sorted(set(b) - set(a), key=str)[:3]
        raise RunError(f"The runs cover different entries in {what} (only in baseline: {missing or '-'}; only in new: "
                       f"{extra or '-'}): compare runs made with the same settings.")


