"""Settings declare themselves once: precedence, validation, and a run identity derived from the marks.

The resume tests enumerate every setting marked as changing the numbers (never a hand-written list), so a new
field is covered without anyone adding it here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from layerprobe.config import AngularConfig, CurveSettings, DataOptions, GradnormConfig, ModelOptions, PruneConfig
from layerprobe.errors import LayerprobeError
from layerprobe.settings import identity
from tests.helpers import changed, invoke, replaced, snapshot


# ---- run identity: every numbers-changing setting refuses a resume ------------------------------------------------


@pytest.fixture(scope="module")
def finished_runs(model_dirs, corpus_file, tmp_path_factory):
    """One finished run per command with --resume, on a tiny model, and the settings it ran with."""
    from layerprobe.commands.angular.run import run_angular
    from layerprobe.commands.gradnorm.run import run_gradnorm
    from layerprobe.commands.prune.curve import run_curve
    from layerprobe.commands.prune.run import run_prune

    root = tmp_path_factory.mktemp("resume")
    model = ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu")
    data = DataOptions(str(corpus_file), tokens=256, seq_len=32, batch_size=2)
    configs = {
        "angular": (run_angular, AngularConfig(model=model, data=data, out=str(root / "a"), lens_tokens=16)),
        "prune": (run_prune, PruneConfig(task="kl", model=model, data=data, out=str(root / "p"))),
        "curve": (run_curve, PruneConfig(task="kl", model=model, data=data, out=str(root / "c"),
                                         curve=CurveSettings(max_removed=1))),
        "gradnorm": (run_gradnorm, GradnormConfig(model=model, device="cpu", dtype="float32", seeds=1, batches=1,
                                                  data=DataOptions(str(corpus_file), tokens=0, seq_len=16, batch_size=2),
                                                  out=str(root / "g"))),
    }
    for run, config in configs.values():
        run(config)
    return configs


def _cases():
    """(command, dotted setting) for every setting marked as changing the numbers, found from the marks."""
    bases = {"angular": AngularConfig(), "prune": PruneConfig(), "curve": PruneConfig(curve=CurveSettings()),
             "gradnorm": GradnormConfig(model=ModelOptions())}
    return [(command, key) for command, base in bases.items() for key in identity(base)]


@pytest.mark.parametrize("command,key", _cases())
def test_resume_with_any_numbers_setting_changed_is_refused(finished_runs, command, key):
    run, config = finished_runs[command]
    folder = Path(config.out)
    before = snapshot(folder)
    value = identity(config).get(key)
    other = changed(type(config), key, value)
    assert identity(replaced(config, key, other)) != identity(config), key
    with pytest.raises(LayerprobeError) as refused:
        run(replaced(dataclasses.replace(config, resume=True), key, other))
    message = str(refused.value)
    named = key.split(".")[-1]
    flag = named.replace("_", "-")  # a switch may be named as turned off: --no-prefix-cache
    assert named in message or f"--{flag}" in message or f"--no-{flag}" in message, message
    assert "\n" not in message
    assert snapshot(folder) == before, "a refused --resume changed the folder"


def test_finished_sweep_resumed_with_the_same_settings_equals_itself(finished_runs):
    """The other side: a resume that matches is not refused (a sweep rewrites what a fresh run writes)."""
    run, config = finished_runs["prune"]
    table = (Path(config.out) / "prune.csv").read_text()
    run(dataclasses.replace(config, resume=True))
    assert (Path(config.out) / "prune.csv").read_text() == table
    assert not (Path(config.out) / ".layerprobe.lock").exists()


def write_task(folder: Path, answer: int) -> None:
    """A local lm-eval task named toytask: the same questions in both folders, another right answer."""
    folder.mkdir()
    rows = [{"question": q, "choices": ["yes", "no"], "answer": answer} for q in ("Is ice cold?", "Is fire hot?")]
    (folder / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "toytask.yaml").write_text(
        f"task: toytask\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'q.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n    aggregation: mean\n"
        "    higher_is_better: true\n")


def test_include_path_resume_is_refused_from_the_cli(tmp_path, model_dirs):
    """The case that let a wrong number through: a finished --include-path A run resumed with --include-path B."""
    task_a, task_b = tmp_path / "a", tmp_path / "b"
    write_task(task_a, answer=0)
    write_task(task_b, answer=1)
    out = tmp_path / "run"
    common = ["prune", str(model_dirs["llama"]), "--task", "toytask", "--dtype", "float32", "--device", "cpu",
              "--layers", "0", "--out", str(out)]
    first = invoke(*common, "--include-path", str(task_a))
    assert first.exit_code == 0, first.output
    summary = json.loads((out / "summary.json").read_text())
    result = invoke(*common, "--include-path", str(task_b), "--resume")
    assert result.exit_code == 2, result.output
    assert "include_path" in result.output and "Traceback" not in result.output
    assert json.loads((out / "summary.json").read_text()) == summary
    assert not (out / ".layerprobe.lock").exists()


def test_layers_csv_is_written_as_its_column_records_say(model_dirs, corpus_file, tmp_path):
    """layers.csv's columns, in order, are runs/columns.py's records: adding one is one record and its values."""
    import pandas as pd

    from layerprobe.commands.angular.run import run_angular
    from layerprobe.runs.columns import LAYERS, names

    run = run_angular(AngularConfig(model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                                    data=DataOptions(str(corpus_file), tokens=128, seq_len=32, batch_size=2), out=str(tmp_path / "a"),
                                    lens_tokens=16))
    assert list(pd.read_csv(run.folder / "layers.csv").columns) == names(LAYERS)
    from layerprobe.commands.angular.read import angular_table
    from layerprobe.runs.read import load_run

    shown = list(angular_table(load_run(run.folder)).columns)
    assert shown[:2] == ["layer", "d(l, 1)"] and "lens KL" in shown and "BI" in shown
