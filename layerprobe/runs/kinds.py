"""How a command's runs are read back (a Kind: its tables, plot, report heading and header facts, its settings
class, its findings, per-layer table, comparer and overlay, and how the report lays its runs out), and KINDS, the
registry report, compare and load_run read. Each Kind is part of its command's record (the command's package) and
`layerprobe.commands.register` adds it here, so this module imports nothing from commands/, report/ or plots/ and
every layer may read it; report/ and runs/compare.py branch on no command's name, they read its Kind.

The functions live in the command's own package (commands/<name>/read.py) and are named as 'module:function'
strings, imported on first use: they load pandas, numpy or matplotlib, which `import layerprobe` and `--help` never
do; tests/unit/test_commands.py resolves every field that may hold one and names each that does not resolve. A
Kind may also hold the functions themselves (a command whose functions are light).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from layerprobe.registry import Registry


@dataclass(frozen=True)
class Tolerance:
    """A key of compare's --tolerance (and [tool.layerprobe.tolerance]): its default and what it bounds."""

    key: str
    default: float
    meaning: str  # one phrase: what it bounds, and how (absolute, relative, a fraction of what)


@dataclass(frozen=True)
class Kind:
    name: str
    tables: tuple[tuple[str, bool], ...]  # (CSV file, required) a finished run holds
    plot: str  # the figure the report shows
    heading: str  # the report's section heading
    header: tuple[tuple[str, str], ...]  # the report header's lines: (label, summary key or a format string of
    # summary keys)
    findings: str | Callable  # (run) -> list of sentences ('module:function' or the function)
    data_table: str | Callable  # (run) -> the per-layer DataFrame printed under the plot
    comparer: str | Callable | None = None  # (old, new, tolerance, into, name), None: not comparable
    label_key: str | None = None  # summary key added to the model name in labels, e.g. the task
    label_word: str = ""  # a word after it, so two kinds of one task read apart ("kl" and "kl curve")
    overlay: str | Callable | None = None  # (run) -> (layers, values): one line of the report's overlay
    overlay_axis: tuple[str, str] = ("", "")  # the overlay's (y label, title)
    config_class: type | None = None  # the settings class its run takes whole and its manifests' "config" holds
    # (compare: what changed); a curve's is PruneConfig, not its record's Command.settings (CurveSettings)
    shared_plots: str | Callable | None = None  # (runs, folder) -> {index: figure}: plots drawn again alike when
    # several runs sit side by side (angular: heatmaps on one colour scale); None: each run's own plot
    wide_past: int | None = None  # more layers than this: a run's section takes the page's width (a bar per layer)
    tolerances: tuple[Tolerance, ...] = ()  # the --tolerance keys it declares (its comparer and others may read them)
    compared_with: tuple[str, ...] = ()  # the --tolerance keys its runs are judged by, where not (only) those it
    # declares (a curve: prune's); the first judges the columns of its other tables (runs/compare_columns.py)
    column_tolerance: tuple[tuple[str, str], ...] = ()  # (column, --tolerance key) where a column of its other
    # tables is judged by another key than the first
    reads: tuple[str, ...] = ()  # summary keys its readers index: load_run refuses a summary.json without one
    words: str | None = None  # how the CLI runs it, where that is not `layerprobe <name>` ('prune --curve'): what an
    # unfinished run's message tells to run with --resume
    check: str | Callable | None = None  # (run) -> None: what its tables and summary must agree on beyond their
    # columns (a curve.csv with the rows of every strategy its summary lists), a RunError naming the damage; load_run
    # calls it, so every reader (report, compare, export --from-curve) refuses the run alike

    @property
    def uses(self) -> tuple[str, ...]:
        """The --tolerance keys its runs are judged by: a key none of the compared runs uses is refused."""
        return tuple(dict.fromkeys(self.compared_with + tuple(t.key for t in self.tolerances)))

    @property
    def facts(self) -> tuple[tuple[str, str], ...]:
        """The old name of header (kept for readers written before the rename)."""
        return self.header

    @property
    def settings(self) -> type | None:
        """The old name of config_class (kept for readers written before the rename)."""
        return self.config_class

    def function(self, attribute: str) -> Callable[..., Any]:
        """The function an attribute holds, imported first where it is named as 'module:function'."""
        return resolve_ref(getattr(self, attribute))


def resolve_ref(ref: str | Callable) -> Callable[..., Any]:
    """A function, or the function a 'module:function' string names (imported on first use)."""
    if callable(ref):
        return ref
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def tolerances() -> dict[str, Tolerance]:
    """Every --tolerance key the registered kinds declare, in registration order (the first declaration of a key)."""
    found: dict[str, Tolerance] = {}
    for kind in KINDS.values():
        for tolerance in kind.tolerances:
            found.setdefault(tolerance.key, tolerance)
    return found


def tolerance_help() -> str:
    """compare's --tolerance help, from the declarations."""
    keys = ", ".join(f"{t.key} ({t.meaning}; default {t.default:g})" for t in tolerances().values())
    return f"KEY=VALUE, repeatable: {keys}."


KINDS: dict[str, Kind] = Registry("run kind")  # command -> its Kind, filled by layerprobe.commands.register from the records
