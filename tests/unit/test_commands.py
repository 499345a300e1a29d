"""The command as the unit (issue 36), unit tier: every name in COMMANDS and KINDS resolves to a function, and a
command added through its record alone (tests/data/dummy_command: one package, one register line) is in the CLI's
help, the library API and docs/outputs.md, and report and compare read its runs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import layerprobe
from layerprobe.commands import COMMANDS, register
from layerprobe.runs.kinds import KINDS, resolve_ref

runner = CliRunner()


def test_every_named_function_of_every_record_resolves():
    for command in COMMANDS.values():
        for attribute in ("cli", "run"):
            if getattr(command, attribute) is not None:
                assert callable(command.function(attribute)), f"{command.name}.{attribute}"
        if command.kind is not None:
            assert KINDS[command.name] is command.kind
        for name, ref in command.exports.items():  # a string names a class or function; the object is one
            assert callable(resolve_ref(ref)), f"{command.name}.exports[{name}]"
    for kind in KINDS.values():
        for attribute in ("findings", "data_table", "comparer", "overlay"):
            if getattr(kind, attribute) is not None:
                assert callable(kind.function(attribute)), f"{kind.name}.{attribute}"


def test_the_cli_and_the_api_are_read_from_the_table():
    from layerprobe.cli import app

    import typer

    listed = typer.main.get_command(app).list_commands(None)
    assert listed == [c.name for c in COMMANDS.values() if c.cli is not None]
    assert {c.api or c.name for c in COMMANDS.values() if c.run is not None} <= set(layerprobe.__all__)


@pytest.fixture
def dummy(monkeypatch, tmp_path):
    """The dummy command registered (its one line), and unregistered after."""
    from layerprobe.runs.columns import TABLES
    from layerprobe.runs.schema import SUMMARIES
    from tests.data.dummy_command import COMMAND

    register(COMMAND)
    monkeypatch.chdir(tmp_path)
    yield COMMAND
    for registry, key in ((COMMANDS, "dummy"), (KINDS, "dummy"), (SUMMARIES, "dummy"), (TABLES, "dummy.csv")):
        registry.pop(key, None)
    layerprobe.__dict__.pop("dummy", None)
    layerprobe.__dict__.pop("DummyConfig", None)


def test_a_command_added_by_its_record_alone_is_everywhere(dummy, tmp_path):
    from layerprobe.cli import build_app
    from layerprobe.report.page import report_runs
    from layerprobe.runs.compare import compare_folders, parse_tolerances
    from layerprobe.runs.schema import render_outputs

    app = build_app()
    assert "dummy" in runner.invoke(app, ["--help"]).output
    assert "--value" in runner.invoke(app, ["dummy", "--help"]).output
    assert layerprobe.dummy is dummy.run and layerprobe.DummyConfig is dummy.settings
    docs = render_outputs()
    assert "## `dummy` summary.json" in docs and "## `dummy.csv`" in docs and "value x l" in docs

    for folder, value in (("a", "2"), ("b", "2"), ("c", "5")):
        done = runner.invoke(app, ["dummy", "--value", value, "--out", folder])
        assert done.exit_code == 0, done.output
    bad = runner.invoke(app, ["dummy", "--value", "-1", "--out", "d"])  # the setting's own declared range
    assert bad.exit_code == 2 and "--value must be a positive number" in bad.output

    same = compare_folders("a", "b", parse_tolerances(None))
    assert same.exit_code == 0 and len(same.checks) == 4
    moved = compare_folders("a", "c", parse_tolerances(None))  # 3 x 3 = 9 against 3 x 6 = 18 at layer 3
    assert moved.exit_code == 1 and {c.where for c in moved.failures} == {"layer 1", "layer 2", "layer 3"}

    page = report_runs(["a", "c"], str(tmp_path))
    html = page.html.read_text()
    assert "Dummy numbers by layer" in html and "The largest number is 15." in html


def test_run_folders_are_named_by_each_record():
    """The default run folders the help texts promise (reports/<model>/prune-<task>, reports/toy, ...), from the one
    naming function of each record; --out wins; the CLI puts the same name under a [tool.layerprobe] out."""
    from layerprobe.config import CurveSettings, GradnormConfig, ModelOptions, PruneConfig, ToyConfig

    prune = PruneConfig(task="mmlu", part="attn", shard="2/4", model=ModelOptions("org/My-Model"))
    assert COMMANDS["prune"].out(prune, prune.model.model) == "reports/org--My-Model/prune-mmlu-attn-shard-2-of-4"
    curve = PruneConfig(task="kl", curve=CurveSettings())
    assert COMMANDS["curve"].out(curve, "minilm") == "reports/minilm/curve-kl"
    assert COMMANDS["gradnorm"].out(GradnormConfig(), "llama-71m") == "reports/llama-71m/gradnorm"
    assert COMMANDS["toy"].out(ToyConfig(), None) == "reports/toy"
    assert COMMANDS["toy"].out(ToyConfig(out="mine"), None) == "mine"


def test_a_project_out_is_the_parent_of_the_records_folder(tmp_path, monkeypatch):
    from layerprobe.cli.common import resolve_settings
    from layerprobe.config import PruneConfig

    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nout = "ci"\n')
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_settings(PruneConfig, {"task": "arc_easy", "part": "mlp"}, command="prune")
    assert config.out == "ci/prune-arc_easy-mlp"
    config, _ = resolve_settings(PruneConfig, {"task": "arc_easy", "out": "here"}, command="prune")
    assert config.out == "here"
