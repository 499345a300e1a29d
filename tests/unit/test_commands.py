"""The command as the unit (issue 36), unit tier: each built-in Kind names functions inside its command's own package
(that every name resolves, which imports every command's run and reader, transformers and peft included: the default
tier's tests/test_command_refs.py), and a command added through its record alone
(tests/data/dummy_command: one package, one register line) is in the CLI's help, the library API and
docs/outputs.md, and report and compare read its runs with the functions of its own read.py."""

from __future__ import annotations

import dataclasses
import sys

import pytest
from typer.testing import CliRunner

import layerprobe
from layerprobe.commands import COMMANDS, Command, register
from layerprobe.runs.kinds import KINDS, Kind, resolve_ref

runner = CliRunner()


def refs(record: Command | Kind) -> list[tuple[str, object]]:
    """(label, value) of every field of a record that may hold a function or a 'module:function' string (any field
    whose type names Callable, so a field added later is checked too), and a Command's exports."""
    found = [(f"{record.name}.{f.name}", getattr(record, f.name)) for f in dataclasses.fields(record)
             if "Callable" in str(f.type) and getattr(record, f.name) is not None]
    found += [(f"{record.name}.exports[{name}]", ref) for name, ref in getattr(record, "exports", {}).items()]
    return found


def unresolved(record: Command | Kind) -> list[str]:
    """'label = value (why)' for each ref of a record that names nothing callable."""
    bad = []
    for label, ref in refs(record):
        try:
            target = resolve_ref(ref)
        except (ImportError, AttributeError, ValueError) as exc:
            bad.append(f"{label} = {ref!r} ({type(exc).__name__}: {exc})")
            continue
        if not callable(target):
            bad.append(f"{label} = {ref!r} (not callable)")
    return bad


def test_a_bad_ref_is_named():
    kind = dataclasses.replace(KINDS["angular"], comparer="layerprobe.commands.angular.read:no_such_function",
                               overlay="layerprobe.commands.no_such_module:angular_by_depth")
    bad = unresolved(kind)
    assert len(bad) == 2 and bad[0].startswith("angular.comparer = 'layerprobe.commands.angular.read:no_such_function'")
    assert bad[1].startswith("angular.overlay = 'layerprobe.commands.no_such_module:angular_by_depth'")


def test_each_kind_reads_its_runs_with_its_own_package():
    """A built-in record's Kind names functions inside the package that holds the record (commands/<name>/read.py),
    never a shared module's."""
    for command in COMMANDS.values():
        if command.kind is None:
            continue
        home = min((name for name, module in sys.modules.items() if name.startswith("layerprobe.commands.")
                    and hasattr(module, "__path__") and any(value is command for value in vars(module).values())),
                   key=len)  # the package whose __init__.py holds the record (its modules import it too)
        for label, ref in refs(command.kind):
            assert isinstance(ref, str) and ref.startswith(home + "."), f"{label} = {ref!r} is outside {home}"


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
    for registry, key in ((COMMANDS, "dummy"), (KINDS, "dummy"), (SUMMARIES, "dummy"), (TABLES, "dummy.csv"),
                          (TABLES, "dummy-copy.csv")):
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
    assert "## `dummy` summary.json" in docs and "## `dummy.csv`\n\nOne row per layer: the dummy's number." in docs
    assert "value x l" in docs and "dummy-copy.csv" not in docs  # a table with another's columns: no section
    assert not unresolved(dummy) and not unresolved(dummy.kind)
    assert all(ref.startswith("tests.data.dummy_command.read:") for _, ref in refs(dummy.kind))

    for folder, value in (("a", "2"), ("b", "2"), ("c", "5")):
        done = runner.invoke(app, ["dummy", "--value", value, "--out", folder])
        assert done.exit_code == 0, done.output
    bad = runner.invoke(app, ["dummy", "--value", "-1", "--out", "d"])  # the setting's own declared range
    assert bad.exit_code == 2 and "--value must be a positive number" in bad.output

    same = compare_folders("a", "b", parse_tolerances(None))  # its comparer's 4, and dummy.csv's 2 numbers x 4 rows
    assert same.exit_code == 0 and len(same.checks) == 4 + 2 * 4
    moved = compare_folders("a", "c", parse_tolerances(None))  # 3 x 3 = 9 against 3 x 6 = 18 at layer 3
    assert moved.exit_code == 1 and {c.where for c in moved.failures if c.metric == "dummy value"} == {
        "layer 1", "layer 2", "layer 3"}
    assert {c.where for c in moved.failures if c.metric == "dummy.csv squared"} == {"layer=1", "layer=2", "layer=3"}

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
    from layerprobe.commands.prune import PRUNE_COMMAND

    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nout = "ci"\n')
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_settings(PRUNE_COMMAND, {"task": "arc_easy", "part": "mlp"})
    assert config.out == "ci/prune-arc_easy-mlp"
    config, _ = resolve_settings(PRUNE_COMMAND, {"task": "arc_easy", "out": "here"})
    assert config.out == "here"
    from layerprobe.commands.heal import COMMAND as HEAL

    config, _ = resolve_settings(HEAL, {"remove": "1"})  # heal too: its record's folder under the project's out
    assert config.out == "ci/heal"
