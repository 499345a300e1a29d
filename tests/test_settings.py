"""Settings declare themselves once: precedence, validation, and a run identity derived from the marks.

The resume tests enumerate every setting marked as changing the numbers (never a hand-written list), so a new
field is covered without anyone adding it here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.config import (AngularConfig, CurveSettings, DataOptions, GradnormConfig, ModelOptions, PruneConfig,
                               ToyConfig)
from layerprobe.errors import ConfigError, LayerprobeError, RunError
from layerprobe.settings import Mark, identity, mark_of, resolve, walk

runner = CliRunner()

# Values that are valid where a plain "other" string would be refused by an earlier check than the resume's
MEANINGFUL = {"shard": ("1/2", "2/2", "1/3"), "layers": ("0", "1", "0,1"), "record_steps": ("0", "0,1", "1")}


def _field(cls: type, path: str) -> tuple[dataclasses.Field, type]:
    for dotted, f, owner in walk(cls):
        if dotted == path:
            return f, owner
    raise KeyError(path)


def changed(cls: type, path: str, value):
    """Another valid value for the setting at `path`, from its Mark (choices, bounds) and its current value."""
    f, owner = _field(cls, path)
    mark = mark_of(f)
    if f.name in MEANINGFUL:
        options = MEANINGFUL[f.name]
        return options[(options.index(value) + 1) % len(options)] if value in options else options[0]
    if isinstance(value, list):
        if mark.choices:
            return tuple(value[:-1]) if len(value) > 1 else tuple(c for c in mark.choices if c not in value)[:1]
        return tuple(v * 0.9 for v in value)
    if mark.choices:
        return next(c for c in mark.choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.1
    if value is None:
        kind = typing_kind(owner, f.name)
        return {int: 1, float: 0.5, bool: True}.get(kind, "other")
    return f"{value}-other"


def typing_kind(owner: type, name: str):
    from layerprobe.settings import _base_type, group_of

    group = group_of(owner, name)
    return group or _base_type(owner, name)


def replaced(config, path: str, value):
    *groups, name = path.split(".")
    if not groups:
        if isinstance(value, type):
            value = value()
        return dataclasses.replace(config, **{name: value})
    inner = getattr(config, groups[0])
    return dataclasses.replace(config, **{groups[0]: replaced(inner, ".".join([*groups[1:], name]), value)})


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


# ---- the marks themselves ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [AngularConfig, PruneConfig, GradnormConfig, ToyConfig])
def test_every_field_declares_itself(cls):
    for path, f, _ in walk(cls):
        mark = mark_of(f)
        assert isinstance(mark, Mark), f"{cls.__name__}.{path} has no setting(...) declaration"
        assert mark.help.strip().endswith((".", ")")), f"{path}: help is one sentence"


def test_help_is_the_declared_text():
    """--help shows the declaration's text (the one place it is written) with this command's default."""
    text = " ".join(runner.invoke(app, ["prune", "--help"], terminal_width=400).output.split())
    assert "Remove N consecutive layers per variant. (default 1)" in text
    assert "ppl/kl/drift: token positions (default 65536)." in text  # prune's own default, not angular's
    text = " ".join(runner.invoke(app, ["angular", "--help"], terminal_width=400).output.split())
    assert "Exact number of token positions to process. (default 262144)" in text


# ---- resolve: CLI > environment > project > default ---------------------------------------------------------------


def _project_fields(cls):
    return [(path, f, owner) for path, f, owner in walk(cls) if mark_of(f).project]


@pytest.mark.parametrize("path", [p for p, _, _ in _project_fields(PruneConfig)])
def test_precedence_for_every_project_setting(path):
    """For every setting [tool.layerprobe] may set: the default, then the project, then the environment, then the
    command line win in turn."""
    from layerprobe.settings import env_name

    f, owner = _field(PruneConfig, path)
    name, choices = f.name, mark_of(f).choices

    def value_of(config):
        target = config
        for part in path.split("."):
            target = getattr(target, part)
        return target

    default = value_of(PruneConfig())
    if choices:
        project_value, env_value, cli_value = [c for c in choices if c != default][:3]
    else:
        project_value = changed(PruneConfig, path, default)
        env_value = changed(PruneConfig, path, project_value)
        cli_value = changed(PruneConfig, path, env_value)
    assert len({str(default), str(project_value), str(env_value), str(cli_value)}) == 4, path

    def given(value):
        out: dict = {"model": {}, "data": {}}
        *groups, last = path.split(".")
        (out[groups[0]] if groups else out)[last] = value
        return out

    config, sources = resolve(PruneConfig, given(None), {}, environ={})
    assert str(value_of(config)) == str(default) and path not in sources
    config, sources = resolve(PruneConfig, given(None), {name: project_value}, environ={})
    assert value_of(config) == project_value and "tool.layerprobe" in sources[path]
    config, sources = resolve(PruneConfig, given(None), {name: project_value}, environ={env_name(name): str(env_value)})
    assert value_of(config) == env_value and env_name(name) in sources[path]
    config, sources = resolve(PruneConfig, given(cli_value), {name: project_value},
                              environ={env_name(name): str(env_value)})
    assert value_of(config) == cli_value and "command line" in sources[path]


def test_validation_names_the_option_the_source_and_the_fix():
    with pytest.raises(ConfigError, match=r"Unknown --dtype 'float23' \(from \[tool.layerprobe\] in x.toml\).*"
                                          r"Did you mean: float32\?"):
        resolve(PruneConfig, {"model": {}, "data": {}}, {"dtype": "float23"}, environ={}, project_file="x.toml")
    with pytest.raises(ConfigError, match=r"--block must be positive, got 0\.$"):
        resolve(PruneConfig, {"block": 0}, {}, environ={})
    with pytest.raises(ConfigError, match=r"LAYERPROBE_TOKENS 'many' is not a valid whole number: pass a positive value"):
        resolve(PruneConfig, {"model": {}, "data": {}}, {}, environ={"LAYERPROBE_TOKENS": "many"})
    with pytest.raises(ConfigError, match=r"--mix-alpha must be within \[0, 1\], got 1.5"):
        resolve(GradnormConfig, {"alpha": 1.5}, {}, environ={})
    with pytest.raises(ConfigError, match=r"Unknown --norm 'peri'"):
        resolve(ToyConfig, {"norms": ("pre", "peri")}, {}, environ={})


def test_cli_bad_value_from_the_project_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nbatch_size = 0\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["angular", "nowhere", "--dataset", "builtin"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--batch-size must be positive, got 0 (from [tool.layerprobe] in" in " ".join(result.output.split())


def test_export_and_toy_read_the_project(tmp_path, monkeypatch):
    """Every command resolves the same way: toy's run folder and export's model come from [tool.layerprobe]."""
    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nout = "runs"\nmodel = "no-such-folder/x/y"\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["toy", "--depth", "3", "--width", "8", "--samples", "16", "--norm", "pre"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "toy" / "summary.json").is_file()
    result = runner.invoke(app, ["export", "--remove", "0", "--out", str(tmp_path / "e")])
    assert result.exit_code == 2 and "no-such-folder/x/y" in result.output


# ---- run identity: every numbers-changing setting refuses a resume ------------------------------------------------


@pytest.fixture(scope="module")
def finished_runs(model_dirs, corpus_file, tmp_path_factory):
    """One finished run per command with --resume, on a tiny model, and the settings it ran with."""
    from layerprobe.commands.angular import run_angular
    from layerprobe.commands.gradnorm.run import run_gradnorm
    from layerprobe.commands.prune.curve import run_curve
    from layerprobe.commands.prune.run import run_prune

    root = tmp_path_factory.mktemp("resume")
    model = ModelOptions(str(model_dirs["llama"]), "float32", "cpu")
    data = DataOptions(str(corpus_file), "text", 256, 32, 2)
    configs = {
        "angular": (run_angular, AngularConfig(model=model, data=data, out=str(root / "a"), lens_tokens=16)),
        "prune": (run_prune, PruneConfig(task="kl", model=model, data=data, out=str(root / "p"))),
        "curve": (run_curve, PruneConfig(task="kl", model=model, data=data, out=str(root / "c"),
                                         curve=CurveSettings(max_removed=1))),
        "gradnorm": (run_gradnorm, GradnormConfig(model=model, device="cpu", dtype="float32", seeds=1, batches=1,
                                                  data=DataOptions(str(corpus_file), "text", 0, 16, 2),
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
    assert named in message or "--" + named.replace("_", "-") in message, message
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
    first = runner.invoke(app, [*common, "--include-path", str(task_a)])
    assert first.exit_code == 0, first.output
    summary = json.loads((out / "summary.json").read_text())
    result = runner.invoke(app, [*common, "--include-path", str(task_b), "--resume"])
    assert result.exit_code == 2, result.output
    assert "include_path" in result.output and "Traceback" not in result.output
    assert json.loads((out / "summary.json").read_text()) == summary
    assert not (out / ".layerprobe.lock").exists()


def test_docs_reference_is_the_help():
    """docs/cli.md is --help, rendered from the declarations: regenerate it with `python -m layerprobe.cli.docs`."""
    from layerprobe.cli.docs import render_reference

    page = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    assert page.read_text() == render_reference(), "docs/cli.md is stale: python -m layerprobe.cli.docs > docs/cli.md"


def test_outputs_reference_is_the_schema():
    """docs/outputs.md is rendered from runs/schema.py: regenerate it with `python -m layerprobe.runs.schema`."""
    from layerprobe.runs.schema import render_outputs

    page = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"
    assert page.read_text() == render_outputs(), "docs/outputs.md is stale: python -m layerprobe.runs.schema > docs/outputs.md"


def test_a_summary_that_breaks_its_schema_is_never_written():
    from layerprobe.runs.schema import check_summary

    good = {"command": "toy", "seconds": 1.0, "warnings": [], "model": "toy", "num_layers": 3, "width": 8,
            "samples": 16, "alphas": [1.0], "seed": 0, "fits": {}, "expected_pre_ln": {}}
    assert check_summary("toy", good)["schema_version"] == 1
    for broken in ({**good, "surprise": 1}, {k: v for k, v in good.items() if k != "width"}, {**good, "width": "8"},
                   {**good, "seed": None}):
        with pytest.raises(RunError, match="breaks its schema"):
            check_summary("toy", broken)


def test_layers_csv_is_written_as_its_column_records_say(model_dirs, corpus_file, tmp_path):
    """layers.csv's columns, in order, are runs/columns.py's records: adding one is one record and its values."""
    import pandas as pd

    from layerprobe.commands.angular import run_angular
    from layerprobe.runs.columns import LAYERS, names

    run = run_angular(AngularConfig(model=ModelOptions(str(model_dirs["llama"]), "float32", "cpu"),
                                    data=DataOptions(str(corpus_file), "text", 128, 32, 2), out=str(tmp_path / "a"),
                                    lens_tokens=16))
    assert list(pd.read_csv(run.folder / "layers.csv").columns) == names(LAYERS)
    from layerprobe.report.tables import angular_table
    from layerprobe.runs.read import load_run

    shown = list(angular_table(load_run(run.folder)).columns)
    assert shown[:2] == ["layer", "d(l, 1)"] and "lens KL" in shown and "BI" in shown
