"""Settings, summary and column records, unit tier: every field declares itself, precedence CLI > environment >
project > default, validation with its source, and the generated references (docs/cli.md, docs/outputs.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.config import AngularConfig, GradnormConfig, HealConfig, PruneConfig, ToyConfig
from layerprobe.errors import ConfigError, RunError
from layerprobe.settings import Mark, mark_of, resolve, walk
from tests.helpers import changed, setting_field

runner = CliRunner()

# ---- the marks themselves ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [AngularConfig, PruneConfig, GradnormConfig, ToyConfig, HealConfig])
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

    f, owner = setting_field(PruneConfig, path)
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
        rule = mark_of(f).applies  # a setting that applies only with some task: given where it does
        if rule and rule[1] == "not":
            out[rule[0]] = "hellaswag"
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
    with pytest.raises(ConfigError, match=r"LAYERPROBE_TOKENS 'many' is not a valid whole number: pass a value at least 2"):
        resolve(PruneConfig, {"model": {}, "data": {}}, {}, environ={"LAYERPROBE_TOKENS": "many"})
    with pytest.raises(ConfigError, match=r"--mix-alpha must be within \[0, 1\], got 1.5"):
        resolve(GradnormConfig, {"alpha": 1.5}, {}, environ={})
    with pytest.raises(ConfigError, match=r"Unknown --norm 'peri'"):
        resolve(ToyConfig, {"norms": ("pre", "peri")}, {}, environ={})


def test_limit_is_a_fraction_below_one_and_a_whole_count_from_one():
    """lm-eval reads --limit below 1 as a fraction of the documents and from 1 as a count: 1.5 is neither (it
    scored one document as if asked for one and a half), refused naming --limit and the fix."""
    for value, source, environ in ((1.5, {"limit": 1.5}, {}), (2.5, {}, {"LAYERPROBE_LIMIT": "2.5"})):
        with pytest.raises(ConfigError, match=rf"--limit {value:g}.* is neither a fraction below 1 nor a whole number: "
                                              rf"pass a whole count \({int(value)}\) or a fraction below 1"):
            resolve(PruneConfig, {"task": "hellaswag", **source}, {}, environ=environ)
    for value in (0.5, 1, 1.0, 2.0, 7):
        config, _ = resolve(PruneConfig, {"task": "hellaswag", "limit": value}, {}, environ={})
        assert config.limit == value


def test_cli_bad_value_from_the_project_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nbatch_size = 0\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["angular", "nowhere", "--dataset", "builtin"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--batch-size must be positive, got 0 (from [tool.layerprobe] in" in " ".join(result.output.split())



def test_docs_reference_is_the_help():
    """docs/cli.md is --help, rendered from the declarations: regenerate it with `python -m layerprobe.cli.docs`."""
    from layerprobe.cli.docs import render_reference

    page = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
    assert page.read_text() == render_reference(), "docs/cli.md is stale: python -m layerprobe.cli.docs > docs/cli.md"


def test_outputs_reference_is_the_schema():
    """docs/outputs.md is rendered from runs/schema.py: regenerate it with `python -m layerprobe.runs.schema`."""
    from layerprobe.runs.schema import render_outputs

    page = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"
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


def test_default_run_folders_keep_the_hub_org(tmp_path, monkeypatch):
    """'my-org/my-model' -> 'my-org--my-model' (two orgs' models never share a folder); a local path -> its name."""
    from layerprobe.runs.folder import slug

    monkeypatch.chdir(tmp_path)
    assert slug("my-org/my-model") == "my-org--my-model"
    assert slug("other-org/my-model") != slug("my-org/my-model")
    (tmp_path / "ckpt" / "llama-7b").mkdir(parents=True)
    assert slug("ckpt/llama-7b") == "llama-7b" and slug("./ckpt/llama-7b/") == "llama-7b"
    assert slug(str(tmp_path / "ckpt" / "llama-7b")) == "llama-7b" and slug("minilm") == "minilm"


# ---- settings by keyword, derived from the marks (issue 36) --------------------------------------------------------


@pytest.mark.parametrize("cls", [AngularConfig, PruneConfig, GradnormConfig, ToyConfig, HealConfig])
def test_settings_take_only_their_first_field_by_position(cls):
    """A field inserted mid-class can never shift a caller's values: past the first, every field is by name."""
    from dataclasses import fields

    from layerprobe.config import DataOptions, ModelOptions

    first = fields(cls)[0]
    value = getattr(cls(), first.name)
    assert getattr(cls(value), first.name) == value
    with pytest.raises(TypeError):
        cls(value, getattr(cls(), fields(cls)[1].name))
    assert ModelOptions("minilm").model == "minilm"  # the README's form
    with pytest.raises(TypeError):
        DataOptions("builtin", "text")


def test_seq_len_given_is_resolved_from_where_seq_len_came():
    """resolve sets DataOptions.seq_len_given from the sources (CLI, environment, project file), no caller patches it."""
    given = {"data": {"seq_len": None}, "model": {}}
    assert resolve(AngularConfig, given, {}, environ={})[0].data.seq_len_given is False
    assert resolve(AngularConfig, {"data": {"seq_len": 64}}, {}, environ={})[0].data.seq_len_given is True
    assert resolve(AngularConfig, given, {"seq_len": 64}, environ={})[0].data.seq_len_given is True
    assert resolve(AngularConfig, given, {}, environ={"LAYERPROBE_SEQ_LEN": "64"})[0].data.seq_len_given is True


def test_project_keys_come_from_every_command_and_where_paths_from_the_marks():
    from layerprobe.config import KEYS
    from layerprobe.settings import project_keys, where_paths

    for cls in (AngularConfig, PruneConfig, GradnormConfig, ToyConfig, HealConfig):
        assert set(project_keys(cls)) <= set(KEYS)
    assert set(where_paths(PruneConfig)) == {"model.model", "data.dataset", "include_path", "task_data", "mmlu_data",
                                             "angular"}


def test_resolved_identity_keys_come_from_the_marks():
    """The resolved.* keys a --resume checks are those the settings' marks name (a group left None has none), and a
    command that supplies one too few or too many is a bug, never a silently different identity."""
    from layerprobe.config import AngularConfig, CurveSettings, HealConfig, PruneConfig
    from layerprobe.settings import resolved_identity

    probe = {"dtype": "float32", "device_kind": "cpu", "seq_len": 32, "weights": "abc", "stack": None,
             "quantization": None}
    assert resolved_identity(PruneConfig(), probe) == {f"resolved.{k}": v for k, v in probe.items()}
    curve = resolved_identity(PruneConfig(curve=CurveSettings()), {**probe, "k_max": 3})
    assert curve["resolved.k_max"] == 3 and len(curve) == 7
    assert set(resolved_identity(AngularConfig(), {**probe, "lens_tokens": 0})) == {
        "resolved.dtype", "resolved.device_kind", "resolved.seq_len", "resolved.weights", "resolved.stack",
        "resolved.quantization", "resolved.lens_tokens"}
    assert resolved_identity(HealConfig(), {**probe, "removed": [2, 3]})["resolved.removed"] == [2, 3]
    with pytest.raises(RuntimeError, match="k_max"):
        resolved_identity(PruneConfig(curve=CurveSettings()), probe)  # declared, not supplied
    with pytest.raises(RuntimeError, match="k_max"):
        resolved_identity(PruneConfig(), {**probe, "k_max": 3})  # supplied, not declared
