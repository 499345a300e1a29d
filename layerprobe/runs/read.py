"""Read finished run folders back: summary, manifest and the command's CSVs, checked for completeness."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError, article, check_path, first_line
from layerprobe.runs.columns import TABLES
from layerprobe.runs.folder import LOCK, later_runs, model_label, read_json, written_by
from layerprobe.runs.kinds import KINDS, Kind
from layerprobe.runs.schema import check_read_summary


@dataclass
class Run:
    """One run folder, loaded."""

    folder: Path
    command: str  # the command that wrote it: its record's name, a key of KINDS (every registered command)
    summary: dict
    manifest: dict
    tables: dict[str, Any] = field(default_factory=dict)  # file stem -> DataFrame
    alias: str | None = None  # a label given where two runs would read alike (report: the folder's name added)

    @property
    def model(self) -> str:
        """The model as titles and labels name it (a local path by its last part)."""
        return model_label(str(self.summary.get("model", "?")))

    @property
    def kind(self) -> Kind:
        return KINDS[self.command]

    @property
    def label(self) -> str:
        """Short name for tables and legends: the model, plus the task where it helps."""
        return self.alias or self.base_label

    @property
    def base_label(self) -> str:
        """The label from the run's own summary: the model, plus the task where it helps."""
        key, word = self.kind.label_key, self.kind.label_word
        return f"{self.model} ({self.summary.get(key)}{' ' + word if word else ''})" if key else self.model

    def plot(self) -> Path | None:
        path = self.folder / self.kind.plot
        return path if path.is_file() else None


def _columns(table: str, what: str) -> tuple[str, ...]:
    """The columns of a CSV that identify a row (key), hold numbers (number) or are never NaN (always), as
    its command's record declares them (TABLES, filled from the records: a table registered later included)."""
    return tuple(c.name for c in (TABLES[table].columns if table in TABLES else ()) if getattr(c, what))


def read_table(csv: Path, finite: bool = True, dtype: dict | None = None) -> Any:
    """Every CSV layerprobe reads back (a run's tables, samples.csv.gz), read and checked in this one place: a file
    that is not gzip where its name says so, a gzip cut short, text that is no CSV, and what check_table refuses
    are one line naming the file (and the row and column where there is one), never a traceback."""
    import gzip
    import zlib

    import pandas as pd

    try:
        # only an empty field is missing (pandas writes NaN so): a written-out nan, NA or null stays text, which
        # check_numbers refuses in a number column, where the default would read it as a gap
        table = pd.read_csv(csv, dtype=dtype, keep_default_na=False, na_values=[""])  # compression from the name
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise RunError(f"'{csv}' is not a whole gzip file ({first_line(exc)}): cut off by a copy or a full disk, or "
                       "not written by layerprobe; re-run the command, or restore the file.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise RunError(f"'{csv}' is not a readable CSV ({first_line(exc)}): re-run the command, or restore the "
                       "file.") from None
    except ValueError as exc:  # a dtype the text cannot take
        raise RunError(f"'{csv}' does not hold the columns layerprobe wrote ({first_line(exc)}): re-run the "
                       "command, or restore the file.") from None
    check_table(csv, table, finite)
    return table


def _first_row(mask: Any) -> int:
    """The 1-based data row (the header not counted) of the first True in `mask` (a pandas Series or numpy array)."""
    import numpy as np

    return int(np.asarray(mask).nonzero()[0][0]) + 1


NAN_WORDS = ("nan", "-nan", "+nan", "na", "n/a", "null", "none", "<na>", "#n/a")  # a NaN written out: never by
# layerprobe, whose tables leave a number that was not measured empty


def check_numbers(csv: Path, table: Any, columns: Any) -> None:
    """Each of `columns` the table has holds numbers (or nothing): else one line naming the row and column (a
    written-out NaN said so)."""
    import pandas as pd

    numeric = {name for name, dtype in zip(table.columns.tolist(), table.dtypes.tolist()) if _numeric(dtype)}
    for column in columns:  # made per column where every column is numeric (as most tables read back are)
        if column in table.columns and column not in numeric:
            values = table[column].to_numpy()  # (rows,) text, NaN where empty: no Series arithmetic
            bad = ~pd.isna(values) & pd.isna(pd.to_numeric(values, errors="coerce"))
            row = _first_row(bad) if bad.any() else 1
            shown = str(values[row - 1])
            what = ("a NaN, where a finite number belongs (layerprobe leaves a number it did not measure empty)"
                    if shown.strip().lower() in NAN_WORDS else "not a number")
            raise RunError(f"'{csv}' row {row}, column {column}: {shown[:30]!r} is {what}: re-run the command, or "
                           "restore the file.")


def _numeric(dtype: Any) -> bool:
    """pandas' is_numeric_dtype (a bool counts), answered for a numpy dtype by its kind: asking pandas cost more than
    the rest of a small table's check."""
    import numpy as np
    import pandas as pd

    return dtype.kind in "biufc" if isinstance(dtype, np.dtype) else pd.api.types.is_numeric_dtype(dtype)


def _floats(table: Any, names: list[str]) -> dict[str, Any]:
    """Each of the table's columns `names` as a float array (NaN where empty): every table read back passes here, most
    of a few rows, where Series arithmetic per column was most of the read. Text in a column (check_numbers refused
    it in a number column) is NaN."""
    import numpy as np
    import pandas as pd

    floats = {}
    for name in names:
        values = table[name]
        if isinstance(values.dtype, np.dtype) and values.dtype.kind in "biuf":  # a plain numpy column: NaN stays NaN
            floats[name] = values.to_numpy().astype(float)
        else:
            floats[name] = (values if _numeric(values.dtype) else pd.to_numeric(values, errors="coerce")).to_numpy(
                dtype=float, na_value=np.nan)
    return floats


def check_finite(csv: Path, table: Any, columns: Any) -> None:
    """No number column the table has holds an infinity, and one neither `optional` nor `gaps` (a number measured in
    every row) is never empty: else one line naming the row and column. `columns`: Column records, or names (a
    records file's per-task metric columns: finite where present). An `always` column keeps its own message
    (check_table); a count or index is check_whole's."""
    import numpy as np

    checked = [c for c in columns if (c if isinstance(c, str) else c.name) in table.columns and (
        isinstance(c, str) or (c.number and not c.whole and not c.always))]
    floats = _floats(table, [c if isinstance(c, str) else c.name for c in checked])
    for column in checked:
        name = column if isinstance(column, str) else column.name
        values = floats[name]
        empty = np.isnan(values)
        gaps = isinstance(column, str) or column.optional or column.gaps
        bad = np.isinf(values) | (empty & (not gaps))
        if bad.any():
            row = _first_row(bad)
            shown = (f"empty (or NaN), where a number measured in every row ({column.meaning[:60]})"
                     if empty[row - 1] else f"'{table[name].iloc[row - 1]}', where a finite number")
            raise RunError(f"'{csv}' row {row}, column {name}: {shown} belongs: re-run the command, or restore "
                           "the file.")


def check_whole(csv: Path, table: Any, columns: Any) -> None:
    """Each count or index column (Column.whole) the table has holds a finite whole number >= 0 in every row (an
    optional one may be empty): else one line naming the row and column, never a NaN layer or a 1.5 k read on.
    (numpy arrays, not pandas Series: every table read back passes here, most of a few rows, where a Series
    operation's overhead was most of the read.)"""
    import numpy as np

    columns = [c for c in columns if c.name in table.columns]
    floats = _floats(table, [c.name for c in columns])
    for column in columns:
        values = floats[column.name]
        empty = np.isnan(values)
        with np.errstate(invalid="ignore"):
            bad = (~empty & (~np.isfinite(values) | (values != np.round(values)) | (values < 0))) \
                | (empty & (not column.optional))
        if bad.any():
            row = _first_row(bad)
            shown = "empty (or NaN)" if empty[row - 1] else f"'{table[column.name].iloc[row - 1]}'"
            raise RunError(f"'{csv}' row {row}, column {column.name}: {shown}, where a whole number >= 0 ({column.meaning}) "
                           "belongs: re-run the command, or restore the file.")


def check_words(csv: Path, table: Any, columns: Any) -> None:
    """Each text column of a given set of words (Column.words: a yes/no flag) the table has holds one of them in every
    row (an optional one may be empty): else one line naming the row and column, never a NaN flag read as True."""
    import numpy as np
    import pandas as pd

    for column in columns:
        if column.name not in table.columns:
            continue
        values = table[column.name].to_numpy()
        if values.dtype == bool:  # read from True/False (a flag, as pandas writes one): never empty, each cell a word
            bad = np.where(values, "True" not in column.words, "False" not in column.words)
            empty = np.zeros(len(values), dtype=bool)
        else:
            empty = pd.isna(values)
            bad = (~empty & ~np.isin(values.astype(str), list(column.words))) | (empty & (not column.optional))
        if bad.any():
            row = _first_row(bad)
            shown = "empty (or NaN)" if empty[row - 1] else repr(str(values[row - 1])[:30])
            raise RunError(f"'{csv}' row {row}, column {column.name}: {shown}, where {' or '.join(column.words)} "
                           "belongs: re-run the command, or restore the file.")


def check_table(csv: Path, table: Any, finite: bool = True) -> None:
    """A CSV read back is whole: it ends where a row ends (layerprobe writes a newline after every row, so a file
    cut by a copy or a full disk is caught even where the cut leaves a shorter number), it holds rows and the
    columns its rows are keyed and always measured by, no row key
    twice, and (with `finite`) no NaN or infinity where a number is always measured: such a run is unusable, for
    report, compare (exit 2, never a REGRESSION verdict on it) and every command reading it alike."""
    import numpy as np

    with open(csv, "rb") as handle:
        handle.seek(max(csv.stat().st_size - 1, 0))
        last = handle.read(1)
    if last != b"\n" and csv.suffix != ".gz":  # a gzip's own trailer catches a cut (read_table)
        raise RunError(f"'{csv}' ends inside a row (cut off by a copy or a full disk): re-run the command, or "
                       "restore the file.")
    if table.empty:
        raise RunError(f"'{csv}' holds no rows: re-run the command.")
    missing = [c for c in dict.fromkeys((*_columns(csv.name, "key"), *_columns(csv.name, "always")))
               if c not in table.columns]
    if missing:  # a row key or an always-measured number: what readers index by
        raise RunError(f"'{csv}' lacks the column '{missing[0]}': re-run the command, or restore the file.")
    check_numbers(csv, table, _columns(csv.name, "number"))
    declared = TABLES[csv.name].columns if csv.name in TABLES else ()
    check_whole(csv, table, [c for c in declared if c.whole])
    if finite:
        check_finite(csv, table, declared)
    check_words(csv, table, [c for c in declared if c.words])
    keys = [k for k in _columns(csv.name, "key") if k in table.columns]
    if keys and _repeats(table, keys):
        twice = table.duplicated(subset=keys)
        row = table[twice].iloc[0]
        where = ", ".join(f"{k}={row[k]}" for k in keys)
        raise RunError(f"'{csv}' row {_first_row(twice)} repeats the row ({where}) (columns {', '.join(keys)}): "
                       "re-run the command, or restore the file.")
    always = [c for c in _columns(csv.name, "always") if c in table.columns] if finite else []
    for column, values in _floats(table, always).items():  # numbers, as check_numbers found them: empty is NaN
        if not np.isfinite(values).all():
            raise RunError(f"'{csv}' has an empty, infinite or NaN {column}: the run is unusable; re-run the command, "
                           "or restore the file.")


def _repeats(table: Any, keys: list[str]) -> bool:
    """Whether a row repeats the keys of an earlier one, as DataFrame.duplicated says (empty equals empty: pandas'
    factorize codes), from the codes of each key column: duplicated over a subset cost more than the rest of a
    small table's check."""
    import numpy as np
    import pandas as pd

    codes = np.stack([pd.factorize(table[key].to_numpy())[0] for key in keys], axis=1)  # (rows, keys)
    return len(np.unique(codes, axis=0)) < len(codes)


def is_run(folder: Path) -> bool:
    return (folder / "summary.json").is_file() and (folder / "manifest.json").is_file()


def load_run(folder: str | Path, finite: bool = True) -> Run:
    """A finished run, or a RunError naming what is wrong with the folder (check_table: whole tables; `finite`:
    no NaN where a number is always measured)."""
    check_path(folder, "load_run's folder")
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise RunError(f"'{folder}' is a file, not a run folder: pass the folder a layerprobe command wrote (its --out).")
    if not path.is_dir():
        raise RunError(f"Run folder '{folder}' does not exist: pass a run folder written by layerprobe.")
    if (path / LOCK).exists():
        raise RunError(unfinished_run(path, folder))
    if not is_run(path):
        raise RunError(f"'{folder}' is not a layerprobe run folder (no summary.json and manifest.json): "
                       "pass the folder a command wrote, e.g. reports/<model>/angular.")
    summary, manifest = read_json(path / "summary.json"), read_json(path / "manifest.json")
    if not isinstance(summary, dict) or not isinstance(manifest, dict):
        raise RunError(f"'{folder}' has a summary.json or manifest.json that is not a JSON object: re-run the command.")
    command = summary.get("command")
    if command not in KINDS:
        raise RunError(f"'{folder}/summary.json' names no known command ({command!r}): re-run the command.")
    check_read_summary(path / "summary.json", command, summary, KINDS[command].reads)
    tables = {}
    for name, required in KINDS[command].tables:
        csv = path / name
        if not csv.is_file():
            if required:
                raise RunError(f"Run '{folder}' is incomplete: {name} is missing. Re-run the command (or --resume).")
            continue
        tables[csv.stem] = read_table(csv, finite)
    check_other_tables(path, command, finite)
    run = Run(path, command, summary, manifest, tables)
    if KINDS[command].check is not None:
        KINDS[command].function("check")(run)
    return run


def check_other_tables(path: Path, command: str, finite: bool = True) -> None:
    """Every other table a record declares (TABLES) that the folder holds, checked as the command's own (read_table),
    though no reader of the run uses it (gradnorm's training.csv, loss.csv): a damaged file is never passed as part
    of a readable run. The records file (*.gz) is left to its own reader (evaluation/records.py read_frame), run
    wherever the records are used: reading it here would read every document of every run a report lists."""
    own = {name for name, _ in KINDS[command].tables}
    for name in TABLES:
        if name not in own and not name.endswith(".gz") and (path / name).is_file():
            read_table(path / name, finite)


def unfinished_run(path: Path, shown: Any = None) -> str:
    """Why an unfinished run folder (its lock is there) cannot be read, and the command that finishes it: its lock
    names the command (a curve's `prune --curve`), whose --resume continues it where it has one."""
    command, shown = written_by(path)[0], shown or path
    kind = KINDS.get(command) if command else None
    words = (kind.words or kind.name) if kind is not None else command
    settings = kind.config_class if kind is not None else None
    if not words:
        finish = "finish it with the same command and --resume, or run it again"
    elif settings is None or "resume" in getattr(settings, "__dataclass_fields__", {}):
        finish = (f"finish it with `layerprobe {words} ... --out {shown} --resume` (the options it was started with), "
                  "or run it again")
    else:
        finish = f"run it again (`layerprobe {words} ... --out {shown} --overwrite`)"
    who = f"{article(words)} {words}" if words else "a"
    return (f"'{shown}' is an unfinished run (its {LOCK} is there: {who} run is writing it, or was killed): "
            f"{finish}{_see_later(path)}.")


def _see_later(folder: Path) -> str:
    """'; later runs sent beside it: X' when runs that found the folder taken went to timestamped siblings."""
    later = later_runs(folder)
    if not later:
        return ""
    shown = ", ".join(f"'{p}'" for p in later[-3:])
    return f"; later run{'s' if len(later) > 1 else ''} with the same --out went to {shown}"


def find_runs(folder: str | Path, finite: bool = True, skipped: list | None = None) -> dict[str, Run]:
    """Runs at or under a folder, keyed by their path relative to it ('' for the folder itself). With `skipped` (a
    list, `report`), a run below the folder that is unfinished (its lock is there) or unreadable is left out and
    appended as (its folder, the reason); without it an unreadable one is an error. None found: an error naming the
    unfinished ones."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise RunError(f"'{folder}' is a file, not a run folder: pass the folder a layerprobe command wrote (its --out).")
    if not path.is_dir():
        raise RunError(f"Run folder '{folder}' does not exist: pass a folder written by layerprobe.")
    if is_run(path):
        return {"": load_run(path, finite)}
    if (path / LOCK).exists() and skipped is None:  # one unfinished run: the finished runs inside it (a curve's
        raise RunError(unfinished_run(path, folder))    # angular/) are its parts, never runs of their own to compare
    found = {}
    for p in sorted(path.rglob("summary.json")):
        try:
            found[str(p.parent.relative_to(path))] = load_run(p.parent, finite)
        except RunError as exc:
            if skipped is None:
                raise
            skipped.append((p.parent, str(exc)))
    unfinished = sorted({lock.parent for lock in path.rglob(LOCK)} | ({path} if (path / LOCK).exists() else set()))
    if found and skipped is not None:
        named = {folder for folder, _ in skipped}
        skipped += [(p, f"an unfinished run (its {LOCK} is there: interrupted, or still being written): resume it "
                        "with the same command and --resume, or run it again")
                    for p in unfinished if p not in named and not any(r.folder == p for r in found.values())]
    if not found:
        if unfinished:
            names = ", ".join(f"'{p}'" for p in unfinished[:3]) + (" ..." if len(unfinished) > 3 else "")
            what = f"'{folder}' is" if unfinished == [path] else f"'{folder}' holds no finished run: {names}"
            raise RunError(f"{what} an unfinished run (interrupted, or still being written): resume it (the same "
                           f"command with --resume, where it has one) or run it again{_see_later(unfinished[0])}.")
        if skipped:
            raise RunError(f"'{folder}' holds no readable run: {skipped[0][1]}")
        raise RunError(f"'{folder}' holds no layerprobe runs (no summary.json below it): pass a run folder"
                       f"{_see_later(path)}.")
    return found
