"""Every record read as input is checked in one reader (issue 47, rule 3): each kind of damage to samples.csv.gz, in
each command that reads it (compare, merge, prune --curve --resume), is one line naming the file and, where there is
one, the row and column; a finished curve refused so stays finished; a shard manifest from a newer version names its
unknown setting; a summary without a key its readers index is one line; a planted partial folder is layerprobe's to
remove only when it carries layerprobe's mark."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import DEMO_REFERENCE, assert_error, invoke
from tests.every_command import TINY

CURVE = ["--task", "kl", "--curve", "--strategies", "last", "--max-removed", "2", *TINY]


def lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode().splitlines()


def put(path: Path, rows: list[str]) -> None:
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


def _drop_column(path: Path, name: str) -> None:
    rows = [row.split(",") for row in lines(path)]
    at = rows[0].index(name)
    put(path, [",".join(r[:at] + r[at + 1:]) for r in rows])


def _cell(path: Path, name: str, value: str) -> None:
    """The first data row's `name` written as `value` (text, as a hand edit or another tool leaves it)."""
    rows = [row.split(",") for row in lines(path)]
    at = rows[0].index(name)
    rows[1][at] = value
    put(path, [",".join(r) for r in rows])


DAMAGE = {  # how -> (damage the file, what the one line says)
    "not gzip": (lambda p: p.write_text("removed,task,doc_id\n"), "not a whole gzip file"),
    "half-cut gzip": (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not a whole gzip file"),
    "duplicated row": (lambda p: put(p, [*lines(p), lines(p)[1]]), "repeats the row"),
    "missing column": (lambda p: _drop_column(p, "doc_id"), "lacks the column 'doc_id'"),
    "non-number": (lambda p: _cell(p, "total", "abc"), "row 1, column total"),
    "infinite number": (lambda p: _cell(p, "total", "inf"), "row 1, column total: 'inf', where a finite number"),
    "written-out NaN": (lambda p: _cell(p, "total", "nan"), "row 1, column total: 'nan' is a NaN"),
    "task's column gone": (lambda p: _drop_column(p, "total"), "lacks the column 'total'"),  # declared optional
}


@pytest.fixture(scope="module")
def made(model_dirs, tmp_path_factory) -> dict[str, Path]:
    """A finished tiny curve and the two shards of a tiny prune sweep, each with per-document records."""
    root = tmp_path_factory.mktemp("made")
    model = str(model_dirs["llama"])
    assert invoke("prune", model, *CURVE, "--out", root / "curve").exit_code in (0, 1)
    for k in (1, 2):
        result = invoke("prune", model, "--task", "kl", *TINY, "--shard", f"{k}/2", "--out", root / f"shard-{k}")
        assert result.exit_code in (0, 1), result.output
    assert all((root / name / "samples.csv.gz").is_file() for name in ("curve", "shard-1", "shard-2"))
    return {"curve": root / "curve", "shard-1": root / "shard-1", "shard-2": root / "shard-2", "model": Path(model)}


def reading(reader: str, made: dict, tmp_path: Path) -> tuple[Path, list]:
    """(the folder whose records get damaged, the command that then reads them)."""
    if reader == "compare":
        damaged = tmp_path / "new"
        shutil.copytree(made["curve"], damaged)
        return damaged, ["compare", made["curve"], damaged]
    if reader == "merge":
        damaged = tmp_path / "shard-2"
        shutil.copytree(made["shard-2"], damaged)
        return damaged, ["merge", made["shard-1"], damaged, "--out", tmp_path / "merged"]
    damaged = tmp_path / "curve"
    shutil.copytree(made["curve"], damaged)
    return damaged, ["prune", made["model"], *CURVE, "--out", damaged, "--resume"]


@pytest.mark.parametrize("how", list(DAMAGE))
@pytest.mark.parametrize("reader", ["compare", "merge", "curve --resume"])
def test_every_damage_to_the_records_is_one_line_in_every_reader(made, tmp_path, reader, how):
    damaged, args = reading(reader, made, tmp_path)
    damage, says = DAMAGE[how]
    damage(damaged / "samples.csv.gz")
    result = invoke(*args)
    assert_error(result, says)
    assert "samples.csv.gz" in result.output
    assert not (damaged / ".layerprobe.lock").exists()  # a finished run refused stays finished, never locked
    assert not (tmp_path / "merged").exists()


def test_a_shard_holding_another_shards_records_is_named_before_merging(made, tmp_path):
    """Shard 2's samples.csv.gz replaced by shard 1's (the variants overlap): one line naming the file, the variant
    and the shard it belongs to, and no merged folder (the records were pivoted first: a pandas traceback)."""
    shard = tmp_path / "shard-2"
    shutil.copytree(made["shard-2"], shard)
    shutil.copy(made["shard-1"] / "samples.csv.gz", shard / "samples.csv.gz")
    first = json.loads((made["shard-1"] / "summary.json").read_text())["shard"]["variants"][0]
    result = invoke("merge", made["shard-1"], shard, "--out", tmp_path / "merged")
    assert_error(result, f"'{shard / 'samples.csv.gz'}' holds records of the variant '{first}', which is shard 1/2's")
    assert "Traceback" not in result.output and not (tmp_path / "merged").exists()


def test_a_shard_from_a_newer_version_names_its_unknown_setting(made, tmp_path):
    shard = tmp_path / "shard-2"
    shutil.copytree(made["shard-2"], shard)
    manifest = json.loads((shard / "manifest.json").read_text())
    manifest["config"]["future_knob"] = 3
    manifest["config"]["data"]["future_data_knob"] = 1
    (shard / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("merge", made["shard-1"], shard, "--out", tmp_path / "merged")
    assert_error(result, "future_knob, data.future_data_knob")
    assert "newer layerprobe" in result.output


def test_a_shard_summary_from_a_newer_version_names_its_unknown_key(made, tmp_path):
    """merge carries its shards' summaries on: a key this version does not declare is named, never dropped."""
    shard = tmp_path / "shard-2"
    shutil.copytree(made["shard-2"], shard)
    summary = json.loads((shard / "summary.json").read_text())
    (shard / "summary.json").write_text(json.dumps({**summary, "future_setting": 3}))
    result = invoke("merge", made["shard-1"], shard, "--out", tmp_path / "merged")
    assert_error(result, "does not know (future_setting)")
    assert "summary.json" in result.output and not (tmp_path / "merged").exists()


def test_merge_says_when_a_shards_missing_records_drop_the_intervals(made, tmp_path):
    shard = tmp_path / "shard-2"
    shutil.copytree(made["shard-2"], shard)
    (shard / "samples.csv.gz").unlink()
    manifest = json.loads((shard / "manifest.json").read_text())
    manifest["files"].remove("samples.csv.gz")
    (shard / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("merge", made["shard-1"], shard, "--out", tmp_path / "merged")
    assert result.exit_code in (0, 1), result.output
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert any("no per-document records" in w and "no paired intervals" in w for w in summary["warnings"])
    assert "no per-document records" in " ".join(result.output.split())


@pytest.mark.parametrize("folder, key", [("prune-drift", "metric"), ("angular", "num_layers")])
def test_a_summary_without_a_key_its_readers_need_is_one_line(tmp_path, folder, key):
    run = tmp_path / folder
    shutil.copytree(DEMO_REFERENCE / folder, run)
    summary = json.loads((run / "summary.json").read_text())
    if folder == "prune-drift":
        del summary[key]
        says = f"lacks the key '{key}'"
    else:
        summary[key] = "four"
        says = f"has '{key}' = four"
    (run / "summary.json").write_text(json.dumps(summary))
    assert_error(invoke("report", run, "--out", tmp_path / "page"), says)


def test_a_resume_removes_only_its_own_partial_folder(made, tmp_path):
    run = tmp_path / "curve"
    shutil.copytree(made["curve"], run)
    ours, planted = run / ".merged.partial-ab12cd34", run / ".merged.partial-mine"
    for folder in (ours, planted):
        folder.mkdir()
        (folder / "weights.bin").write_bytes(b"x")
    ours.with_name(ours.name + ".layerprobe").write_text("layerprobe\n")  # what files.publishing leaves beside it
    result = invoke("prune", made["model"], *CURVE, "--out", run, "--resume")
    assert result.exit_code in (0, 1), result.output
    assert not ours.exists() and not ours.with_name(ours.name + ".layerprobe").exists()
    assert (planted / "weights.bin").read_bytes() == b"x"


@pytest.mark.parametrize("reader", ["heal", "export"])
def test_a_curve_row_whose_removed_is_not_k_blocks_is_refused_by_every_reader(made, tmp_path, reader):
    """A curve.csv row edited so that 'removed' names more (or fewer) blocks than its k: every command that applies
    a curve's choice (--from-curve) refuses it naming the file, the row and both counts, never removing the edited
    blocks under that k."""
    damaged = tmp_path / "curve"
    shutil.copytree(made["curve"], damaged)
    import pandas as pd

    curve = pd.read_csv(damaged / "curve.csv")
    curve["removed"] = curve["removed"].astype(str)
    curve.loc[curve["k"] == 1, "removed"] = "1,2"  # two blocks under k = 1
    curve.to_csv(damaged / "curve.csv", index=False)
    extra = ["--method", "lstsq", *TINY, "--no-gain"] if reader == "heal" else ["--device", "cpu", "--no-verify"]
    result = invoke(reader, made["model"], "--from-curve", damaged, "--strategy", "last", "--k", "1", *extra,
                    "--out", tmp_path / "out")
    assert_error(result, "the last row at k = 1 has 'removed' 1,2, which is 2 blocks, not 1")
    assert "curve.csv" in result.output and not (tmp_path / "out").exists()


def test_a_damaged_angular_run_given_to_prune_is_refused_before_the_sweep_writes(model_dirs, tmp_path):
    """--angular DIR whose angular.csv holds a NaN distance: one line naming the file, and no prune folder at all
    (it was refused after the sweep, leaving a locked half-run)."""
    import pandas as pd

    angular = tmp_path / "angular"
    assert invoke("angular", model_dirs["llama"], *TINY, "--out", angular).exit_code == 0
    table = pd.read_csv(angular / "angular.csv")
    table.loc[0, "distance"] = float("nan")
    table.to_csv(angular / "angular.csv", index=False)
    result = invoke("prune", model_dirs["llama"], "--task", "ppl", *TINY, "--angular", angular, "--out", tmp_path / "p")
    assert_error(result, "angular.csv' has an empty, infinite or NaN distance")
    assert not (tmp_path / "p").exists()


def test_impossible_gradnorm_counts_are_one_line_before_any_work():
    for flag, value in (("--seeds", "100000000000"), ("--batches", "10000000000")):
        assert_error(invoke("gradnorm", "--arch", "tiny", flag, value, "--device", "cpu"), f"{flag} must be within")


def test_a_curve_file_that_lost_a_whole_strategy_is_refused_by_report(tmp_path):
    """curve.csv cut at a row boundary (the last strategy's rows gone) still parses: report names the missing curve
    instead of drawing the page without it (exit 0 before)."""
    import pandas as pd

    folder = shutil.copytree(Path(__file__).resolve().parents[1] / "reports" / "demo" / "smollm2-curve-kl",
                             tmp_path / "curve")
    table = pd.read_csv(folder / "curve.csv")
    table[table["strategy"] != "last"].to_csv(folder / "curve.csv", index=False)
    assert_error(invoke("report", folder, "--out", tmp_path / "page"), "has no rows of the last curve(s)")
