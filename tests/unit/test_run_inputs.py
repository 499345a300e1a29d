"""Run folders read as input (issue 38, item 4), without loading a model: a model path a run recorded relative to its
working directory is resolved there or refused; a curve run missing a key or a column is one line naming the file
and the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from layerprobe.errors import LayerprobeError, RunError
from layerprobe.removal import from_curve, recorded_model

CURVE = Path(__file__).resolve().parents[1] / "data" / "demo" / "smollm2-curve-kl"


def _run(folder: Path, cwd: str | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({} if cwd is None else {"cwd": cwd}))
    return folder


def _one_line(caught: pytest.ExceptionInfo, *needles: str) -> None:
    text = str(caught.value)
    assert "\n" not in text and all(n in text for n in needles), text


def test_a_relative_model_path_is_resolved_where_the_run_was_made(tmp_path, monkeypatch):
    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    (made / "models" / "m").mkdir(parents=True)
    elsewhere.mkdir()
    run = _run(tmp_path / "run", str(made))
    monkeypatch.chdir(elsewhere)
    assert recorded_model(run, "models/m") == str(made / "models" / "m")
    assert recorded_model(run, str(made / "models" / "m")) == str(made / "models" / "m")  # absolute: as written
    assert recorded_model(run, "HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"  # nothing on disk: a hub id


def test_a_relative_model_path_that_moved_is_refused(tmp_path, monkeypatch):
    """The recorded directory no longer holds it, and another folder of that name is here: never the wrong
    weights silently; a ./path with no recorded directory that resolves nowhere: refused too."""
    made, here = tmp_path / "made", tmp_path / "here"
    made.mkdir()
    (here / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(here)
    with pytest.raises(RunError) as caught:
        recorded_model(_run(tmp_path / "run", str(made)), "models/m")
    _one_line(caught, "summary.json", "'models/m'", str(made), "pass MODEL")
    with pytest.raises(RunError) as caught:
        recorded_model(_run(tmp_path / "old", None), "./gone/m")
    _one_line(caught, "summary.json", "relative to another working directory", "pass MODEL")


def _damaged_curve(tmp_path: Path, csv_column: str | None = None, summary_key: str | None = None) -> Path:
    run = tmp_path / "curve"
    shutil.copytree(CURVE, run)
    if csv_column:
        pd.read_csv(run / "curve.csv").drop(columns=[csv_column]).to_csv(run / "curve.csv", index=False)
    if summary_key:
        summary = json.loads((run / "summary.json").read_text())
        del summary[summary_key]
        (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_the_demo_curve_is_read():
    model, removed, part = from_curve(str(CURVE), "angular", 2)
    assert (model, removed, part) == ("smollm2", "14-15", "block")


@pytest.mark.parametrize("column", ["strategy", "k", "removed"])
def test_a_curve_missing_a_column_is_one_line(column, tmp_path):
    with pytest.raises(LayerprobeError) as caught:
        from_curve(str(_damaged_curve(tmp_path, csv_column=column)), "angular", 2)
    _one_line(caught, "curve.csv", f"'{column}'")


@pytest.mark.parametrize("key", ["model", "curve"])
def test_a_curve_missing_a_summary_key_is_one_line(key, tmp_path):
    with pytest.raises(LayerprobeError) as caught:
        from_curve(str(_damaged_curve(tmp_path, summary_key=key)), "angular", None)
    _one_line(caught, "summary.json", f"'{key}'")
