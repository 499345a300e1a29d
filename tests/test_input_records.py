"""Issue 41 rules 4 and 6 (issue 38 item 4): records read as input are verified (a damaged or foreign removal
record, one that disagrees with itself, a curve of other weights or another directory, a run missing a column),
and the GGUF cache folder is checked as a whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import layerprobe
from layerprobe import LayerprobeError
from tests.helpers import assert_error, invoke
from tests.every_command import TINY, run_args


# ---- rule 4 and issue 38 item 4: records read as input are verified ------------------------------------------------

@pytest.fixture
def exported(model_dirs, tmp_path):
    out = tmp_path / "exported"
    assert invoke(*run_args("export", model_dirs, out, "--no-verify")).exit_code == 0
    return out


@pytest.mark.slow  # loads the tiny model per case
@pytest.mark.parametrize("damage,needle", [
    (lambda r: "{not json", "is not valid JSON"),
    (lambda r: json.dumps([r]), "holds a list"),
    (lambda r: json.dumps({k: v for k, v in r.items() if k != "removed"}), "lacks the key 'removed'"),
    (lambda r: json.dumps({**r, "removed": [7]}), "'removed' names blocks [7]"),
    (lambda r: json.dumps({**r, "weights": "sha256-head-tail:" + "0" * 64}), "other weights"),
])
def test_a_damaged_or_foreign_removal_record_is_one_line(exported, damage, needle, tmp_path):
    record = exported / "layerprobe-removal.json"
    record.write_text(damage(json.loads(record.read_text())))
    result = invoke("heal", exported, "--steps", "1", "--no-gain", *TINY, "--out", tmp_path / "h")
    assert_error(result, needle)
    assert "layerprobe-removal.json" in result.output and "--remove" not in result.output.split("error:")[1][:60]


def test_a_removal_record_that_disagrees_with_itself_is_refused():
    """Each key heal could re-prune the source by, edited apart from the others: one line naming the file and both
    keys (never a heal of other blocks than the export removed)."""
    from layerprobe.removal import check_record_ids
    from layerprobe.errors import RunError

    path = Path("export/layerprobe-removal.json")
    record = {"removed": [1], "kept": [0, 2, 3], "num_layers_original": 4, "num_layers_exported": 3, "part": "block"}
    assert check_record_ids(record, path, 4) == [1]
    assert check_record_ids({"removed": [1], "part": "block"}, path, 4) == [1]  # older records: what they hold
    for edit, needle in (({"removed": [2]}, "'removed' [2] and 'kept' [0, 2, 3] disagree"),
                         ({"kept": [0, 1, 3]}, "'removed' [1] and 'kept' [0, 1, 3] disagree"),
                         ({"kept": "0,2,3"}, "'kept' \"0,2,3\" disagree"),
                         ({"num_layers_original": 5}, "'num_layers_original' is 5"),
                         ({"num_layers_exported": 2}, "'num_layers_exported' says 2")):
        with pytest.raises(RunError) as caught:
            check_record_ids({**record, **edit}, path, 4)
        assert needle in str(caught.value) and str(path) in str(caught.value), str(caught.value)


@pytest.mark.slow  # a curve and four exports of tiny models
def test_a_curve_of_other_weights_or_another_directory(model_dirs, tmp_path, monkeypatch):
    """A curve of qwen2 applied to llama: refused unless --allow-other-weights; a curve that recorded its model
    relative to another working directory resolves it where it was run; a curve missing a key is one line."""
    work = tmp_path / "work"
    shutil.copytree(model_dirs["qwen2"], work / "qwen2")
    monkeypatch.chdir(work)
    curve = tmp_path / "curve"
    result = invoke("prune", "qwen2", "--task", "kl", "--curve", "--strategies", "last", "--max-removed", "1",
                    *TINY, "--out", curve)
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path)  # the recorded 'qwen2' is relative to work/
    common = ["--from-curve", curve, "--strategy", "last", "--k", "1", "--device", "cpu", "--no-verify"]
    result = invoke("export", *common, "--out", tmp_path / "e1")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "e1" / "layerprobe-removal.json").read_text())["source_path"] == str(work / "qwen2")
    other = ["--dtype", "float32"]
    assert_error(invoke("export", model_dirs["llama"], *common, *other, "--out", tmp_path / "e2"), "other weights")
    assert_error(invoke("heal", model_dirs["llama"], "--from-curve", curve, "--strategy", "last", "--k", "1",
                        "--steps", "1", "--no-gain", *TINY, "--out", tmp_path / "h"), "other weights")
    allowed = invoke("export", model_dirs["llama"], *common, "--allow-other-weights", "--out", tmp_path / "e3")
    assert allowed.exit_code == 0, allowed.output
    healed = invoke("heal", model_dirs["llama"], "--from-curve", curve, "--strategy", "last", "--k", "1",
                    "--allow-other-weights", "--steps", "1", "--no-gain", *TINY, "--out", tmp_path / "h2")
    assert healed.exit_code == 0, healed.output
    assert json.loads((tmp_path / "h2" / "summary.json").read_text())["removed_layers"] == [3]  # the curve's choice
    summary = json.loads((curve / "summary.json").read_text())
    del summary["model"]
    (curve / "summary.json").write_text(json.dumps(summary))
    assert_error(invoke("export", *common, "--out", tmp_path / "e4"), "lacks the key 'model'")


@pytest.mark.parametrize("table,column", [("angular.csv", "distance"), ("angular.csv", "n"),
                                          ("layers.csv", "layer")])
def test_a_run_read_as_input_missing_a_column_is_one_line(table, column, tmp_path):
    """What --angular, --from-curve, report and compare read: a table without a column its rows need."""
    import pandas as pd

    from tests.helpers import DEMO_REFERENCE

    run = tmp_path / "angular"
    shutil.copytree(DEMO_REFERENCE / "angular", run)
    pd.read_csv(run / table).drop(columns=[column]).to_csv(run / table, index=False)
    with pytest.raises(LayerprobeError, match=f"{table}' lacks the column '{column}'"):
        layerprobe.load_run(run)

# ---- issue 47 rule 3: every declared table of every command, damaged, is refused by the one reader ----------------

REPO = Path(__file__).resolve().parent.parent
BULKY = ("*.safetensors", "*.png", "*.gguf", "*.bin", "*.html", "merged")


@pytest.fixture(scope="module")
def holders(tmp_path_factory) -> dict[str, Path]:
    """table file -> a finished run folder holding it: the committed runs (reports/), and a toy run and a gradnorm
    --steps run (toy.csv, training.csv, loss.csv: no committed run holds them), made here."""
    from layerprobe.runs.columns import TABLES
    from layerprobe.runs.read import find_runs

    root = tmp_path_factory.mktemp("holders")
    assert invoke("toy", "--depth", "4", "--width", "8", "--samples", "16", "--out", root / "toy").exit_code == 0
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", "1", "--batches", "1", "--steps", "2",
                    "--dataset", "builtin", "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
                    "--out", root / "gradnorm")
    assert result.exit_code == 0, result.output
    found: dict[str, Path] = {}
    for base in (REPO / "reports" / "demo", REPO / "reports" / "examples", root):
        for run in find_runs(base).values():
            for name in TABLES:
                if (run.folder / name).is_file():
                    found.setdefault(name, run.folder)
    return found


def _damaged_cell(header: list[str], rows: list[list[str]], file: str) -> tuple[str, int]:
    """The first number column (not a count, not a yes/no) with a value in the first data row."""
    from layerprobe.runs.columns import TABLES

    declared = {c.name: c for c in TABLES[file].columns}
    for at, name in enumerate(header):
        column = declared.get(name)
        if column is not None and column.number and not column.whole and not column.words and rows[1][at] != "":
            return name, at
    raise AssertionError(f"{file}: no number cell in its first row")


def _damage(path: Path, how: str) -> str:
    """The file with its first data row given twice, or one number of it infinite or a written-out NaN; returns the
    column damaged (or '' for the repeated row)."""
    import csv
    import gzip
    import io

    packed = path.name.endswith(".gz")
    text = gzip.decompress(path.read_bytes()).decode() if packed else path.read_text()
    rows = list(csv.reader(io.StringIO(text)))
    column = ""
    if how == "repeated row":
        rows.append(list(rows[1]))
    else:
        column, at = _damaged_cell(rows[0], rows, path.name)
        rows[1][at] = {"infinity": "inf", "negative infinity": "-inf", "written-out NaN": "nan"}[how]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_bytes(gzip.compress(out.getvalue().encode()) if packed else out.getvalue().encode())
    return column


def _read(folder: Path, file: str) -> None:
    """What report and compare read of a run: the run (load_run), and its records where it holds them."""
    from layerprobe.evaluation import records

    layerprobe.load_run(folder)
    if file.endswith(".gz"):
        records.read_frame(folder)


def _every_table() -> list[str]:
    from layerprobe.commands import COMMANDS  # noqa: F401  (registers the records: TABLES filled)
    from layerprobe.runs.columns import TABLES

    return sorted(TABLES)


@pytest.mark.parametrize("how", ["repeated row", "infinity", "negative infinity", "written-out NaN"])
@pytest.mark.parametrize("file", _every_table())
def test_every_declared_table_damaged_is_one_line_naming_it(holders, file, how, tmp_path):
    """Issue 47 rule 3, as a rule over every command's declared tables (TABLES): a real run holding the table reads,
    and the same run with that table's first row given twice, or one of its numbers infinite or NaN written out, is
    refused in one line naming the file (and, for a number, the row and column); never read as data (a healed_score
    'nan', a toy hidden_norm 'inf', a training.csv given twice each passed report, a samples total 'inf' passed
    compare as 'tolerance only')."""
    assert file in holders, f"no run here holds {file}: make one in the holders fixture"
    run = tmp_path / "run"
    shutil.copytree(holders[file], run, ignore=shutil.ignore_patterns(*BULKY))
    _read(run, file)  # as written: read
    column = _damage(run / file, how)
    with pytest.raises(LayerprobeError) as caught:
        _read(run, file)
    message = str(caught.value)
    assert "\n" not in message and f"'{run / file}'" in message, message
    if how == "repeated row":
        assert "repeats the row" in message, message
    else:
        assert column in message, message


TEXT_KEYS = ("removed_label", "architecture", "layers_path", "sublayer", "from_curve", "strategy", "dtype", "device")
LIST_KEYS = ("kept", "zeroed_parameters", "formats", "files")
OTHER_KEYS = ("num_layers_original", "num_layers_exported", "verified_max_difference", "gain", "healing",
              "source_removal", "original")  # numbers and objects


@pytest.mark.parametrize("key", TEXT_KEYS + LIST_KEYS + OTHER_KEYS)
def test_every_key_of_a_removal_record_is_checked_by_type(key, tmp_path):
    """layerprobe-removal.json's keys (removal_record's, lineage's, heal's), each of its type (an export's
    kept = "all" was accepted by export and heal): a value of the wrong type (a list where text belongs, text where
    a list, a number or an object belongs, a list of the wrong items) is one line naming the file and the key."""
    from layerprobe.removal import read_removal

    record = {"source_model": "m", "part": "block", "removed": [1]}
    path = tmp_path / "layerprobe-removal.json"
    for wrong in (["a"],) if key in TEXT_KEYS else ("all", [None]) if key in LIST_KEYS else ("all", [1]):
        path.write_text(json.dumps({**record, key: wrong}))
        with pytest.raises(LayerprobeError, match=f"'{key}' is "):
            read_removal(path)
    path.write_text(json.dumps({**record, key: None}))  # null: the record has none (from_curve of a plain export)
    assert read_removal(path)[key] is None


def test_an_export_whose_record_has_a_mistyped_key_is_refused_by_export(exported, tmp_path):
    record = exported / "layerprobe-removal.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "kept": "all"}))
    result = invoke("export", exported, "--remove", "0", "--device", "cpu", "--no-verify", "--out", tmp_path / "again")
    assert_error(result, "layerprobe-removal.json': 'kept' is \"all\", not a list of block ids")
    assert not (tmp_path / "again").exists()


# ---- rule 6: the GGUF cache folder as a whole ----------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["adapter_model.safetensors", "adapter_config.json",
                                     "model-00002-of-00002.safetensors", "sub/model.safetensors"])
def test_a_file_planted_in_the_gguf_cache_is_refused(planted, tmp_path):
    from layerprobe.models import gguf

    folder = tmp_path / "cache"
    folder.mkdir()
    files = {}
    for name, data in (("model.safetensors", b"weights"), ("config.json", b"{}")):
        (folder / name).write_bytes(data)
        files[name] = gguf.file_sha256(folder / name)
    (folder / gguf.INFO_FILE).write_text(json.dumps({"architecture": "llama", "quantization": "Q4_1",
                                                     "sha256": "ab" * 32, "files": files}))
    source = SimpleNamespace(sha256="ab" * 32)
    gguf.verify_cached(folder, source)  # as written: trusted
    (folder / planted).parent.mkdir(exist_ok=True)
    (folder / planted).write_bytes(b"{}")
    with pytest.raises(LayerprobeError, match=f"holds {planted.split('/')[0]}, which layerprobe did not write"):
        gguf.verify_cached(folder, source)
