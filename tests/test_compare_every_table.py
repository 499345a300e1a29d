"""compare covers every table (CSV) and every numeric column a comparable command's record declares (issue 47,
rule 6), enumerated over the records: in a copy of a run of each command (angular, prune, curve, gradnorm --steps,
monitor), each column with values damaged (x 10 + 1), dropped, or its whole file removed, fails (exit 1) or is
refused (exit 2), named; never OK. A standard error is judged on its own scale, not the score's. Runs whose settings
make a column exist in one only (an unhealed and a healed curve) name it as not comparable; with the same settings
it fails. A --tolerance key the compared runs are not judged by is refused, as an unknown one is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from layerprobe.runs.columns import FILES, TABLES
from layerprobe.runs.kinds import KINDS, tolerances

from .helpers import DEMO_REFERENCE, invoke

EXAMPLES = Path(__file__).resolve().parent.parent / "reports" / "examples"
RUNS = {"angular": DEMO_REFERENCE / "angular", "prune": DEMO_REFERENCE / "prune-drift",
        "curve": DEMO_REFERENCE / "smollm2-curve-kl", "monitor": EXAMPLES / "monitor-pre-71m"}  # gradnorm: made below


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A run of every comparable command: the committed ones, and a tiny gradnorm --steps run (training.csv,
    loss.csv, gradnorm_samples.csv beside gradnorm.csv and variance.csv)."""
    out = tmp_path_factory.mktemp("gradnorm") / "gns"
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", "1", "--batches", "1", "--steps", "4",
                    "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2", "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    return {**RUNS, "gradnorm": out}


def test_every_comparable_command_has_a_run_here():
    assert {name for name, kind in KINDS.items() if kind.comparer is not None and FILES.get(name)} <= {*RUNS, "gradnorm"}


def cases() -> list:
    """(command, file, column) for every numeric, non-key column of every CSV each comparable command declares."""
    found = []
    for command in [*RUNS, "gradnorm"]:
        for file in FILES[command]:
            if file.endswith(".csv"):
                found += [(command, file, c.name) for c in TABLES[file].columns
                          if c.number and not c.key and "<" not in c.name]
    return found


CASES = cases()


def test_the_cases_reach_the_tables_compare_used_to_skip():
    named = {(command, file) for command, file, _ in CASES}
    assert {("angular", "layers.csv"), ("gradnorm", "training.csv"), ("gradnorm", "loss.csv"),
            ("curve", "scores.csv"), ("monitor", "monitor.csv")} <= named
    assert ("prune", "prune.csv", "pruned_stderr") in CASES and ("angular", "layers.csv", "block_influence") in CASES


def pair(runs: dict, command: str, tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(runs[command], old)
    shutil.copytree(runs[command], new)
    return old, new


def filled(folder: Path, file: str) -> pd.DataFrame | None:
    """The run's table (None: the run holds no such file), every declared number it leaves empty (a committed run
    made before the column, or without records) filled with a plausible value: a count 0, a p-value 0.5, else 0.25."""
    if not (folder / file).is_file():
        return None
    table = pd.read_csv(folder / file)
    for column in TABLES[file].columns:
        if column.number and not column.key and "<" not in column.name and not (
                column.name in table and table[column.name].notna().any()):
            table[column.name] = 0 if column.whole else 0.5 if column.compare == "probability" else 0.25
    return table


LABELS = {"distance": "d(l,n)", "distance_next": "d(l,1)", "grad_norm": "grad", "score": "curve", "delta": "dP",
          "baseline": "baseline"}  # the comparers' own names of the numbers they judge first


@pytest.mark.parametrize("command, file, column", CASES)
def test_a_damaged_or_dropped_column_never_passes(runs, tmp_path, command, file, column):
    old, new = pair(runs, command, tmp_path)
    table = filled(new, file)
    if table is None:
        pytest.skip(f"{runs[command].name} holds no {file}")
    for folder in (old, new):
        table.to_csv(folder / file, index=False)
    assert invoke("compare", old, new).exit_code == 0
    named = (column, f"FAIL {LABELS.get(column, column)}", f" {LABELS.get(column, column)} ")
    damaged = table.copy()
    damaged[column] = damaged[column] * 10 + 1
    damaged.to_csv(new / file, index=False)
    result = invoke("compare", old, new)
    assert result.exit_code in (1, 2) and any(n in result.output for n in named), result.output
    table.drop(columns=[column]).to_csv(new / file, index=False)
    result = invoke("compare", old, new)
    assert result.exit_code in (1, 2) and any(n in result.output for n in named), result.output


@pytest.mark.parametrize("command, file", sorted({(c, f) for c, f, _ in CASES}))
def test_a_declared_file_missing_from_the_new_run_never_passes(runs, tmp_path, command, file):
    old, new = pair(runs, command, tmp_path)
    if not (new / file).is_file():
        pytest.skip(f"{runs[command].name} holds no {file}")
    (new / file).unlink()
    result = invoke("compare", old, new)
    assert result.exit_code in (1, 2) and file in result.output, result.output


def test_a_standard_error_is_judged_on_its_own_scale(tmp_path):
    """ppl: a baseline of 30,000 let a stderr of 120 go to 1,219 under 5% of the score's scale."""
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(RUNS["prune"], old)
    table = pd.read_csv(old / "prune.csv")
    table["delta_stderr"] = 120.0
    table["baseline"] = 30000.0
    table["pruned"] = table["baseline"] + table["delta"]
    table.to_csv(old / "prune.csv", index=False)
    shutil.copytree(old, new)
    table["delta_stderr"] = 120.0 * 1.04  # within 5% of itself
    table.to_csv(new / "prune.csv", index=False)
    assert invoke("compare", old, new).exit_code == 0
    table["delta_stderr"] = 120.0 * 1.06
    table.to_csv(new / "prune.csv", index=False)
    result = invoke("compare", old, new)
    assert result.exit_code == 1 and "delta_stderr" in result.output, result.output
    manifest = json.loads((new / "manifest.json").read_text())
    manifest["config"]["limit"] = 7  # fewer documents: a larger standard error is what that setting makes
    (new / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("compare", old, new)
    assert result.exit_code == 0 and "prune.csv delta_stderr (a spread" in result.output, result.output


def healed(folder: Path, heal: str | None) -> None:
    """The demo curve as a healed curve: its healed numbers filled, and (heal) its manifest saying so."""
    table = pd.read_csv(folder / "curve.csv")
    table["healed_score"], table["healed_delta"] = table["score"] * 0.9, table["delta"] * 0.9
    table["heal_change"] = table["healed_score"] - table["score"]
    table.to_csv(folder / "curve.csv", index=False)
    if heal:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["config"]["curve"]["heal"] = heal
        (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("healed_side", ["old", "new"])
def test_an_unhealed_and_a_healed_curve_name_the_healed_columns_as_not_comparable(tmp_path, healed_side):
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(RUNS["curve"], old)
    shutil.copytree(RUNS["curve"], new)
    healed(tmp_path / healed_side, "lstsq")
    result = invoke("compare", old, new)
    assert result.exit_code == 0, result.output
    assert "settings that change the numbers differ (curve.heal" in result.output
    for column in ("healed_score", "healed_delta", "heal_change"):
        assert f"curve.csv {column} holds values in the " in result.output and "not comparable" in result.output


@pytest.mark.parametrize("healed_side", ["old", "new"])
def test_healed_columns_in_one_run_only_under_the_same_settings_fail(tmp_path, healed_side):
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(RUNS["curve"], old)
    shutil.copytree(RUNS["curve"], new)
    healed(tmp_path / healed_side, None)  # the numbers of a repair the manifest never made: damage
    result = invoke("compare", old, new)
    assert result.exit_code == 1 and "FAIL curve kl healed_score" in result.output, result.output


TOLERANCE_CASES = [(command, key) for command in [*RUNS, "gradnorm"] for key in tolerances()]


@pytest.mark.parametrize("command, key", TOLERANCE_CASES)
def test_a_tolerance_key_the_runs_are_not_judged_by_is_refused(runs, command, key):
    """Applies: the key changes the verdict on a run whose numbers moved; else refused, naming it."""
    result = invoke("compare", runs[command], runs[command], "--tolerance", f"{key}=0.5")
    if key in KINDS[command].uses:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2 and f"--tolerance {key} does not apply to {command} runs" in result.output


MOVED = {("angular", "angular"): ("angular.csv", "distance"), ("prune", "prune"): ("prune.csv", "delta"),
         ("curve", "prune"): ("curve.csv", "score"), ("gradnorm", "gradnorm"): ("gradnorm.csv", "grad_norm"),
         ("gradnorm", "variance"): ("variance.csv", "variance"), ("monitor", "angular"): ("monitor.csv", "distance_next"),
         ("monitor", "gradnorm"): ("monitor.csv", "grad_norm"), ("angular", "variance"): ("layers.csv", "variance"),
         ("monitor", "variance"): ("monitor.csv", "variance")}  # a number each key judges, by its meaning


@pytest.mark.parametrize("command, key", list(MOVED))
def test_each_key_a_command_uses_decides_a_check(runs, tmp_path, command, key):
    """The keys counted as used are the ones whose value decides: 0 fails a moved number that 1000 passes."""
    assert set(KINDS[command].uses) == {k for c, k in MOVED if c == command}
    old, new = pair(runs, command, tmp_path)
    file, column = MOVED[(command, key)]
    table = pd.read_csv(new / file)
    row = table[column].notna().idxmax()
    table.loc[row, column] = table.loc[row, column] * 1.001 + 1e-4
    if column == "delta":  # keep each run's derived columns true to their parts (pruned = baseline + delta)
        table["pruned"] = table["baseline"] + table["delta"]
    if column == "score":
        table["delta"] = table["score"] - table["baseline"]
    table.to_csv(new / file, index=False)
    others = [f"--tolerance={k}=1000" for k in KINDS[command].uses if k != key]
    assert invoke("compare", old, new, f"--tolerance={key}=0", *others).exit_code == 1
    assert invoke("compare", old, new, f"--tolerance={key}=1000", *others).exit_code == 0
