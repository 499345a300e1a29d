"""The reader's refusals (tests/unit/test_column_kinds.py) tried on every declared column of every registered table:
the unit tier tries one column of each kind, this every other column with its own values, so a column declared of a
kind but not checked as one is caught too. Default tier: some 630 damaged files written and read (~3 s on 2 cores)."""

from __future__ import annotations

import pytest

from tests.unit.test_column_kinds import CASES, UNIT_CASES, checked, refuses_by_kind

OTHERS = [(file, column) for file, column in CASES if checked(column) and (file, column) not in UNIT_CASES]


@pytest.mark.parametrize("file, column", OTHERS, ids=[f"{f}:{c.name}" for f, c in OTHERS])
def test_every_other_column_is_enforced_by_its_kind(file, column, tmp_path):
    refuses_by_kind(file, column, tmp_path)
