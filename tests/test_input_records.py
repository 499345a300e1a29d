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
