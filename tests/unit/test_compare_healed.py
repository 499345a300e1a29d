"""compare reads every number a healed curve declares (issue 47, rule 6): a healed_score, healed_delta or
heal_change ten times worse fails, one that moved within the tolerance passes, one present in one run only fails."""

from __future__ import annotations

import pandas as pd
import pytest

from layerprobe.commands.prune.read_curve import HEALED_NUMBERS, compare_curve
from layerprobe.runs.columns import TABLES
from layerprobe.runs.compare import Comparison
from layerprobe.runs.read import Run


def curve_run(folder, healed: dict | None) -> Run:
    table = pd.DataFrame({"strategy": ["angular"], "k": [1], "fraction": [0.25], "removed": ["2"], "metric": ["kl"],
                          "baseline": [0.0], "score": [0.5], "delta": [0.5], "within": [True]})
    for column, value in (healed or {}).items():
        table[column] = [value]
    summary = {"command": "curve", "task": "kl", "metric": "kl", "part": "block"}
    return Run(folder, "curve", summary, {}, {"curve": table})


def test_every_healed_number_curve_csv_declares_is_compared():
    declared = {c.name for c in TABLES["curve.csv"].columns}
    scores = {c for c in declared if c.startswith(("healed_", "heal_")) and not c.endswith(("_lo", "_hi"))}
    assert scores == set(HEALED_NUMBERS)


@pytest.mark.parametrize("column", HEALED_NUMBERS)
@pytest.mark.parametrize("factor, fails", [(1.0, False), (1.0001, False), (10.0, True)])
def test_a_healed_number_is_judged_like_the_score(tmp_path, column, factor, fails):
    healed = {"healed_score": 0.2, "healed_delta": 0.1, "heal_change": -0.3}
    old = curve_run(tmp_path / "a", healed)
    new = curve_run(tmp_path / "b", {**healed, column: healed[column] * factor})
    into = Comparison("a", "b")
    compare_curve(old, new, {"prune": 0.01}, into, "")
    judged = [c for c in into.checks if c.metric.endswith(column)]
    assert len(judged) == 1 and judged[0].failed is fails
    assert not [c for c in into.checks if c.failed and not c.metric.endswith(column)]


def test_healed_numbers_in_one_run_only_fail(tmp_path):
    into = Comparison("a", "b")
    compare_curve(curve_run(tmp_path / "a", None), curve_run(tmp_path / "b", {"healed_score": 0.2}), {"prune": 0.01},
                  into, "")
    assert [c.metric for c in into.checks if c.failed] == ["curve kl healed_score"]
