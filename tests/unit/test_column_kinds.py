"""Every declared column of every record is enforced by its kind in the one reader (runs/read.py read_table; issue 47
rule 3): a count or index (Column.whole) holds a finite whole number >= 0 (NaN, infinity, -1 or 1.5 refused; empty
only where the column is optional), a yes/no column (Column.words) True or False, a number column holds numbers, an always-measured one is never NaN, a key never
repeats. Each refusal is one line naming the file, the row and the column. A number column holds no infinity and no
written-out NaN (nan, NA, null: layerprobe leaves a number it did not measure empty), and is empty only where declared
`optional` or `gaps`. Tried here on one column of each kind with every value its kind refuses (every other column
of every registered table with its own: tests/test_column_kinds_every_column.py, the default tier), and every
column's values taken and every table's repeated keys, from a table built here from the declarations, written to
disk and read back."""

from __future__ import annotations

import functools
import math

import pytest

from layerprobe.commands import COMMANDS  # noqa: F401  (registers the built-in records: TABLES is filled)
from layerprobe.errors import RunError
from layerprobe.runs.columns import TABLES
from layerprobe.runs.read import read_table

ROWS = 3


def declared() -> list[tuple[str, object]]:
    return [(file, column) for file, table in TABLES.items() for column in table.columns]


def whole_table(file: str):
    """A table every check passes: each declared column, keys distinct per row, numbers whole where declared so."""
    import pandas as pd

    values = {}
    for column in TABLES[file].columns:
        if column.words:
            values[column.name] = [column.words[i % len(column.words)] for i in range(ROWS)]
        elif not column.number:
            values[column.name] = [f"{column.name}{i}" for i in range(ROWS)]
        else:
            values[column.name] = [i + 1 for i in range(ROWS)]  # whole, distinct, finite
    return pd.DataFrame(values)


def write(tmp_path, file: str, frame):
    path = tmp_path / file
    frame.to_csv(path, index=False)  # compression from the name, as layerprobe writes samples.csv.gz
    return path


@pytest.mark.parametrize("file", sorted(TABLES))
def test_a_whole_table_of_every_record_reads(file, tmp_path):
    table = read_table(write(tmp_path, file, whole_table(file)))
    assert len(table) == ROWS


CASES = [(file, column) for file, column in declared()]


def checked(column) -> bool:
    """A column the reader checks by kind: numbers or words (free text takes anything; a key's repeats: below)."""
    return bool(column.number or column.words)


def one_of_each_kind(cases) -> list:
    """The first declared column of each kind (the values kinds() gives it): every rule of the reader, each refused
    value put in (and every spelling of a written-out NaN where the kind refuses one): the unit tier's share of the
    damaged files, 36 of the 661 the columns' own values make. Every other column, with its own values: in the
    default tier, tests/test_column_kinds_every_column.py."""
    first = {}
    for file, column in cases:
        if checked(column):
            first.setdefault(repr(kinds(column)), (file, column))
    return list(first.values())


SPELLED = ("nan", "NaN", "NA", "null")  # a NaN written out: read as text (keep_default_na=False), like "abc"


def kinds(column, position: int = 0) -> tuple[list, list]:
    """(values refused, values taken) in a number column of this kind. A written-out NaN is one spelling per column,
    the `position`-th of SPELLED in turn: the spellings are read alike for every column (read_csv's own NaN words
    switched off for the whole file), so each column meets one beside its "abc", and every table of four number
    columns or more all four."""
    spelled = SPELLED[position % len(SPELLED)]
    if column.whole:
        return (["abc", 1.5, -1, math.inf] + ([] if column.optional else [math.nan]),
                [7] + ([math.nan] if column.optional else []))
    if column.words:
        return ["abc", "1"] + ([] if column.optional else [math.nan]), [column.words[-1]] + (
            [math.nan] if column.optional else [])
    if column.always:
        return ["abc", math.inf, math.nan, spelled], [1.5]
    gaps = column.optional or column.gaps  # left empty where not measured: declared per column
    return (["abc", math.inf, -math.inf, spelled] + ([] if gaps else [math.nan]),
            [1.5, -2.0] + ([math.nan] if gaps else []))


UNIT_CASES = one_of_each_kind(CASES)


@functools.cache  # read only: damaged() copies the rows it changes
def cells(file: str) -> tuple[list[str], list[list[str]]]:
    """whole_table's header and rows as the CSV text pandas writes for them: the damaged cell below is put in as
    text, one file written per value (a DataFrame copied, set and written by pandas for each of some 800 values was
    most of this file's time)."""
    frame = whole_table(file)
    return list(frame.columns), [[str(value) for value in row] for row in frame.itertuples(index=False)]


def write_cells(tmp_path, file: str, header: list[str], rows: list[list[str]]):
    """The CSV text of `rows` (gzip where the name says so, as layerprobe writes samples.csv.gz). Written over the
    file's bytes, then cut to its length: a file truncated to nothing first frees its block, which cost 0.4 ms a write
    on a disk mounted with discard (most of the ~1,000 writes' time), where this costs 0.02 ms."""
    import gzip
    import os

    path = tmp_path / file
    data = "".join(",".join(row) + "\n" for row in [header, *rows]).encode("utf-8")
    data = gzip.compress(data, mtime=0) if file.endswith(".gz") else data
    handle = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.write(handle, data)
        os.ftruncate(handle, len(data))
    finally:
        os.close(handle)
    return path


def as_written(value) -> str:
    """A value as pandas' to_csv writes it: NaN as an empty field, infinity as inf."""
    return "" if isinstance(value, float) and math.isnan(value) else str(value)


@pytest.mark.parametrize("file, column", UNIT_CASES, ids=[f"{f}:{c.name}" for f, c in UNIT_CASES])
def test_each_kind_is_enforced(file, column, tmp_path):
    refuses_by_kind(file, column, tmp_path, every_spelling=True)


def refuses_by_kind(file: str, column, tmp_path, every_spelling: bool = False) -> None:
    """Each value a column of its kind refuses, put in the second data row, is refused in one line naming the file,
    the row and the column (with `every_spelling`, each of SPELLED where the kind refuses a written-out NaN, not the
    column's one). (Free text takes anything; a key column's repeats: below.)"""
    header, rows = cells(file)
    where = header.index(column.name)
    refused, _ = kinds(column, where)  # the values taken: test_every_column_takes_the_values_of_its_kind
    if every_spelling and set(refused) & set(SPELLED):
        refused = [value for value in refused if value not in SPELLED] + list(SPELLED)
    for value in refused:
        copy = [list(row) for row in rows]
        copy[1][where] = as_written(value)  # the second data row
        with pytest.raises(RunError) as caught:
            read_table(write_cells(tmp_path, file, header, copy))
        message = str(caught.value)
        assert "\n" not in message and str(tmp_path / file) in message and column.name in message, message
        if not column.always or value == "abc":
            assert f"row 2, column {column.name}:" in message, message


@pytest.mark.parametrize("file", sorted(TABLES))
def test_every_column_takes_the_values_of_its_kind(file, tmp_path):
    """Each column's values taken (kinds), put in the second data row of every column of the table at once: the i-th
    value of each column in the i-th file (a column with fewer keeps its whole value). Each check of the reader is
    one column's (its text, its numbers, its emptiness, its dtype read from its own cells, which are those of the
    table with that column alone changed), and row 2's keys stay distinct (7, or empty, against 1 to 3), so the
    table read whole says each column alone takes each value: one read per value instead of one per column and value
    (most of this file's time)."""
    header, rows = cells(file)
    taken = {column.name: kinds(column)[1] for column in TABLES[file].columns if column.number or column.words}
    for i in range(max(map(len, taken.values()), default=0)):
        copy = [list(row) for row in rows]
        for name, values in taken.items():
            if i < len(values):
                copy[1][header.index(name)] = as_written(values[i])
        chosen = {name: values[i] for name, values in taken.items() if i < len(values)}
        assert len(read_table(write_cells(tmp_path, file, header, copy))) == ROWS, chosen


def test_every_table_declares_the_key_of_its_rows():
    """The repeated-row check below is a rule for every table: a table without a declared key (toy.csv had none, and
    read a row given twice as data) would be exempt."""
    assert [file for file, table in TABLES.items() if not any(c.key for c in table.columns)] == []


def test_the_columns_left_empty_where_not_measured_are_declared_so():
    """Only these number columns may be empty in a row (the last row's distance, an interval without records, a
    spread of one sample, heal's unscored steps): every other number column is finite in every row. Hand-kept
    list: a column newly declared `gaps` is a decision, seen here."""
    gaps = {(file, c.name) for file, c in declared() if c.number and c.gaps}
    assert gaps == {
        ("layers.csv", "distance_next"), ("monitor.csv", "distance_next"), ("monitor.csv", "block_influence"),
        ("training.csv", "distance_next"), ("training.csv", "block_influence"),
        *((f, c) for f in ("prune.csv", "scores.csv") for c in ("baseline_stderr", "pruned_stderr", "delta_stderr",
                                                               "delta_lo", "delta_hi", "p_value")),
        *(("curve.csv", c) for c in ("delta_stderr", "delta_lo", "delta_hi", "p_value")),
        ("gradnorm.csv", "std"), ("variance.csv", "std"), ("heal.csv", "loss"), ("heal.csv", "lr"),
        ("heal.csv", "heldout_ppl"), ("heal.csv", "heldout_kl"), ("replace.csv", "cosine_lstsq"),
        ("toy.csv", "cos_next")}


@pytest.mark.parametrize("file", sorted(f for f, t in TABLES.items() if any(c.key for c in t.columns)))
def test_a_repeated_key_is_named(file, tmp_path):
    frame = whole_table(file)
    frame.loc[2] = frame.loc[1]
    with pytest.raises(RunError, match=r"row 3 repeats the row"):
        read_table(write(tmp_path, file, frame))


def test_the_counts_the_replay_found_are_declared_whole():
    """angular.csv's tokens (a NaN there was read on) and the other counts and indices of the records."""
    whole = {(file, c.name) for file, c in declared() if c.whole}
    for case in [("angular.csv", "tokens"), ("angular.csv", "layer"), ("angular.csv", "n"), ("layers.csv", "tokens"),
                 ("layers.csv", "layer"), ("curve.csv", "k"), ("prune.csv", "layer"), ("prune.csv", "block"),
                 ("samples.csv.gz", "doc_id"), ("samples.csv.gz", "tokens"), ("gradnorm.csv", "step"),
                 ("heal.csv", "step"), ("replace.csv", "first"), ("replace.csv", "tokens"), ("toy.csv", "layer")]:
        assert case in whole, case


def test_the_columns_a_nan_passed_in_are_declared_so():
    """prune.csv's and curve.csv's family (always written, 0 outside the family: a NaN there passed compare and
    report) is a whole number in every row; the yes/no flags are True or False."""
    kinds = {(file, c.name): c for file, c in declared()}
    for file in ("prune.csv", "curve.csv", "scores.csv"):
        assert kinds[(file, "family")].whole and not kinds[(file, "family")].optional
        assert kinds[(file, "significant")].words == ("True", "False")
    assert kinds[("curve.csv", "within")].words == ("True", "False")
    assert kinds[("replace.csv", "cosine_kept_lstsq")].words and kinds[("replace.csv", "cosine_kept_lstsq")].optional
