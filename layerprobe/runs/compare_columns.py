"""`compare` over every numeric column a run's record declares (issue 47, rule 6), by the column's rule (Column.compare,
COMPARE_RULES): column_checks walks one table's two runs row by row (prune's and curve's comparers call it on their
main table), declared_tables every other CSV the command's record declares (layers.csv, training.csv, loss.csv, ...)
beyond the columns its comparer judged itself.

One rule for a column with values in one run only, in every table: in the baseline only (the new run lost a number,
or its file), each row fails as 'value -> nan', unless the runs' settings differ (then it is named as not comparable,
as compare notes every other setting change); in the new run only, it is named (a later layerprobe's column), and
fails where the settings are the same and the column exists only by a setting (alone_fails: a healed curve's numbers).
A count (a `whole` or `exact` column) or a spread (`relative`: a standard error or deviation) that differs where
the settings differ is named, not failed: it follows them (fewer tokens, a larger standard error).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from layerprobe.runs.checks import Check, Comparison, outside

COMPARE_RULES = {  # Column.compare -> how compare judges that column, row by row (a `whole` column: exact)
    "scale": "the tolerance x the row's scale, max(|baseline|, |delta|, |its own value|) of the baseline run's row "
             "(a score, an interval bound)",
    "relative": "the tolerance x its own value in the baseline run's row (a standard error or deviation: a spread "
                "judged on the score's scale would pass ten times its size)",
    "exact": "equal to 1e-9 relative (a count, an index, k / layers)",
    "derived": "equal to 1e-9 relative, in each run, to what it is derived from (derived:baseline+delta: pruned = "
               "baseline + delta)",
    "probability": "an absolute change within the tolerance (a p-value, on [0, 1])",
    "absolute": "an absolute change within the tolerance (a distance, cosine or share on a fixed range, as d(l, n) is "
                "judged: near 0 a relative rule would fail any sampling change)",
}


def column_checks(into: Comparison, name: str, file: str, pair: tuple, label: str, where: Any,
                  tol: float | Callable[[str], float], done: tuple = (), alone_fails: tuple = ()) -> None:
    """Every numeric column `file`'s record declares, beyond `done` (the comparer's own checks), row by row: pair, the
    two runs' rows with one index (same_keys checked); where(index) names a row; tol, the tolerance (or column ->
    tolerance); each judged by its column's rule (COMPARE_RULES), a column in one run only by the module's rule."""
    from layerprobe.runs.columns import TABLES

    into.covered[(name, file)] = None
    a, b = pair
    differ = into.changed.get(name)
    run = repr(name) + ": " if name else ""
    for column in TABLES[file].columns:
        if not column.number or column.key or column.name in done or "<" in column.name:
            continue
        has = [column.name in t and bool(t[column.name].notna().any()) for t in (a, b)]
        if not any(has):
            continue
        alone = f"{run}{file} {column.name} holds values in the {'baseline' if has[0] else 'new'} run only: not"
        if not all(has) and differ:
            into.notes.append(f"{alone} comparable (the settings differ: {', '.join(differ)})")
            continue
        if has == [False, True] and column.name not in alone_fails:
            into.notes.append(f"{alone} compared")
            continue
        rule = "exact" if column.whole else column.compare
        limit = tol(column.name) if callable(tol) else tol
        checks = [Check(name, f"{label} {column.name}", where(key), *found) for key, row in a.iterrows()
                  if (found := _column_check(row, b.loc[key], column.name, rule, limit)) is not None]
        if differ and rule in ("exact", "relative") and any(c.failed for c in checks):
            what = "a count" if rule == "exact" else "a spread, which follows the sample's size"
            into.notes.append(f"{run}{file} {column.name} ({what}) differs as the settings do: not compared")
            continue
        into.checks += checks


def declared_tables(old: Any, new: Any, tol: dict[str, float], into: Comparison, name: str) -> None:
    """Every CSV the command's record declares (runs.columns.FILES) that its comparer did not walk whole, by
    column_checks: rows paired by the table's key columns, each column by the tolerance its Kind names for it
    (Kind.column_tolerance, else the first key it is compared with). A file in one run only reads as a table with
    every value missing in the other (so the module's rule holds for whole files too); per-document records
    (.csv.gz) are read for the paired intervals, not here."""
    from layerprobe.runs.columns import FILES, TABLES

    kind = old.kind
    by_column = dict(kind.column_tolerance)
    default = (kind.compared_with or tuple(t.key for t in kind.tolerances) or ("",))[0]

    def limit(column: str) -> float:
        return tol.get(by_column.get(column, default), 0.0)

    for file in FILES.get(old.command, ()):
        done = into.covered.get((name, file), ())
        if done is None or not file.endswith(".csv"):
            continue
        a, b = _table(old, file), _table(new, file)
        if a is None and b is None:
            continue
        keys = [c.name for c in TABLES[file].columns if c.key and all(t is None or c.name in t for t in (a, b))]
        a, b = (t.set_index(keys) if t is not None else None for t in (a, b))
        a = a if a is not None else b.iloc[:, :0]  # a file in one run only: every value missing in the other
        b = b if b is not None else a.iloc[:, :0]
        if not (a.index.is_unique and b.index.is_unique):
            into.notes.append(f"{repr(name) + ': ' if name else ''}{file}: rows not told apart by {', '.join(keys)} "
                              "in both runs (a run of an earlier layerprobe): not compared")
            continue
        a, b = _shared_rows(a, b, file, into, name)
        column_checks(into, name, file, (a, b), file, lambda key: _where(keys, key), limit, done=done)


def _shared_rows(a: Any, b: Any, file: str, into: Comparison, name: str) -> tuple[Any, Any]:
    """The rows both runs hold; rows in one run only are named (a curve that chose other sets scored other rows in
    scores.csv; its comparer notes the changed choice, and refuses where its own table's rows differ)."""
    only_old, only_new = a.index.difference(b.index), b.index.difference(a.index)
    if len(only_old) or len(only_new):
        into.notes.append(f"{repr(name) + ': ' if name else ''}{file}: {len(only_old)} rows in the baseline only, "
                          f"{len(only_new)} in the new run only (e.g. {list(only_old[:1]) + list(only_new[:1])}): "
                          "the rows both hold are compared")
    shared = a.index.intersection(b.index)
    return a.loc[shared], b.loc[shared]


def _table(run: Any, file: str) -> Any:
    """The run's table (as loaded, or read and checked now), None where the run has no such file."""
    from layerprobe.runs.read import read_table

    stem = file.split(".")[0]
    if stem in run.tables:
        return run.tables[stem]
    path = run.folder / file
    return read_table(path, finite=False) if path.is_file() else None


def _where(keys: list[str], key: Any) -> str:
    values = key if isinstance(key, tuple) else (key,)
    return " ".join(f"{k}={v}" for k, v in zip(keys, values))


def _number(row: Any, column: str) -> float:
    value = row.get(column, math.nan)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _column_check(row: Any, other: Any, column: str, rule: str, tol: float) -> tuple | None:
    """(old, new, delta, limit, failed) of one row's value by its rule; None where both runs leave it empty."""
    x, y = _number(row, column), _number(other, column)
    if math.isnan(x) and math.isnan(y):
        return None
    if rule.startswith("derived:"):  # e.g. derived:baseline+delta: each run's value against its own parts
        parts = rule.split(":", 1)[1]
        first, sign, second = parts.partition("+") if "+" in parts else parts.partition("-")
        factor = 1.0 if sign == "+" else -1.0
        gaps = [v - (_number(r, first) + factor * _number(r, second)) for v, r in ((x, row), (y, other))]
        worst = max(gaps, key=lambda g: abs(g) if g == g else math.inf)
        limit = 1e-9 * max(1.0, abs(x))
        return x, y, worst, limit, outside(x, y, worst, limit)
    delta = y - x
    if rule == "exact":
        limit = 1e-9 * max(1.0, abs(x))
    elif rule in ("probability", "absolute"):
        limit = tol
    elif rule == "relative":
        limit = tol * abs(x) if x == x else 0.0
    else:
        limit = tol * max([abs(v) for v in (_number(row, "baseline"), _number(row, "delta"), x) if v == v] + [1e-12])
    return x, y, delta, limit, outside(x, y, delta, limit)
