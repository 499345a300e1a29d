"""What a run writes is declared (issue 52): write_run refuses a CSV or a column no record declares, and every CSV
of every committed run folder under reports/ holds declared columns only."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pandas as pd
import pytest

import layerprobe.commands  # noqa: F401 (registers the built-in records)
from layerprobe.errors import RunError
from layerprobe.runs.columns import TABLES, names
from layerprobe.runs.schema import check_tables

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def test_a_declared_table_passes_and_an_undeclared_column_or_file_is_refused():
    check_tables("gradnorm", {"loss": pd.DataFrame(columns=["norm", "seed", "step", "loss"])})
    with pytest.raises(RunError, match=r"loss\.csv's \['lr'\]"):
        check_tables("gradnorm", {"loss": pd.DataFrame(columns=["norm", "seed", "step", "loss", "lr"])})
    with pytest.raises(RunError, match="notes.csv, which no record declares"):
        check_tables("gradnorm", {"notes": pd.DataFrame(columns=["layer"])})


def _header(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        return next(csv.reader(handle), [])


def _run_files() -> list[Path]:
    """Every CSV inside a finished run folder (one with manifest.json) under reports/."""
    return sorted(p for p in REPORTS.rglob("*.csv*") if (p.parent / "manifest.json").is_file())


def test_every_committed_run_writes_declared_columns_only():
    assert _run_files(), "no committed run found under reports/"
    bad = []
    for path in _run_files():
        table = TABLES.get(path.name)
        if table is None:
            bad.append(f"{path.relative_to(REPORTS)}: no record declares {path.name}")
            continue
        if path.name == "samples.csv.gz":  # after the fixed columns, one column per per-document metric
            continue
        extra = [c for c in _header(path) if c not in names(table.columns)]
        if extra:
            bad.append(f"{path.relative_to(REPORTS)}: undeclared {extra}")
    assert not bad, "\n".join(bad)
