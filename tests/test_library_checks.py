"""Issue 41 rule 3: the library validates like the CLI (each field, None and wrong types, compare and the
settings), and messages say what the input is (heal without a removal, a curve's blocks outside the model,
resolve refusing what it would drop, compare --max-rows)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import layerprobe
from layerprobe import LayerprobeError
from tests.helpers import assert_error, invoke
from tests.every_command import TINY


# ---- rule 3: the library validates like the CLI --------------------------------------------------------------------

def _library_cases(missing: str) -> list:
    from layerprobe import AngularConfig, DataOptions, GradnormConfig, HealConfig, ModelOptions, TrainSettings

    model = ModelOptions(missing)
    return [
        (lambda: layerprobe.angular(None), "AngularConfig"),
        (lambda: layerprobe.angular(AngularConfig(model=missing)), "model"),
        (lambda: layerprobe.angular(AngularConfig(model=model, data=DataOptions(tokens="256"))), "tokens"),
        (lambda: layerprobe.heal(HealConfig(model=model, remove="1", steps=2.5)), "steps"),
        (lambda: layerprobe.heal(HealConfig(model=model, remove="1", lr=math.nan)), "--lr"),
        (lambda: layerprobe.heal(HealConfig(model=model, remove="1", lr=-1.0)), "--lr"),
        (lambda: layerprobe.heal(HealConfig(model=model, remove="1", eval_every=0)), "--eval-every"),
        (lambda: layerprobe.prune(layerprobe.PruneConfig(model=model, task="kl", block=0)), "--block"),
        (lambda: layerprobe.gradnorm(GradnormConfig(train=TrainSettings(steps=-1))), "--steps"),
        (lambda: layerprobe.export(layerprobe.ExportConfig(model=model, remove=5)), "remove"),
        (lambda: layerprobe.toy(layerprobe.ToyConfig(depth=0)), "--depth"),
        (lambda: layerprobe.LayerMonitor(None, None, every="5"), "every"),
        (lambda: layerprobe.LayerprobeCallback(None, tokens=0).on_train_begin(None, None, None), "--tokens"),
    ]


def test_the_library_checks_each_field_before_any_model_loads(tmp_path):
    missing = str(tmp_path / "no-such-model")
    for call, field in _library_cases(missing):
        with pytest.raises(LayerprobeError) as caught:
            call()
        text = str(caught.value)
        assert field in text and "\n" not in text, text
        assert "does not exist" not in text  # refused before the model was looked for
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(LayerprobeError, match="is a file"):
        layerprobe.load_run(tmp_path / "a-file")


COMMANDS = ("angular", "prune", "curve", "gradnorm", "export", "heal", "toy")  # each takes its *Config
NOT_CALLED = {"Run", "RunResult", "LayerprobeError", "AngularConfig", "PruneConfig", "CurveSettings",
              "GradnormConfig", "TrainSettings", "ExportConfig", "HealConfig", "ToyConfig", "ModelOptions",
              "DataOptions", "MonitorSettings"}  # types: their fields are checked where a command takes them


def test_every_public_function_refuses_none_and_wrong_types(tmp_path):
    """Every callable of layerprobe's public API (layerprobe._API, but the types) given None, a number, an empty
    string or a list where its first argument belongs: one LayerprobeError naming the argument, never a TypeError,
    AttributeError or KeyError from inside."""
    from layerprobe import _API

    called = sorted(set(_API) - NOT_CALLED)
    assert set(COMMANDS) | {"merge", "compare", "load_run", "resolve", "validate", "LayerMonitor",
                            "LayerprobeCallback"} == set(called)  # a new public function joins this test
    for name in called:
        function = getattr(layerprobe, name)
        for bad in (None, 123, "", [1]):
            args = {"compare": (bad, str(tmp_path)), "resolve": (bad, {})}.get(name, (bad,))
            if name == "LayerprobeCallback":  # takes the tokenizer; the trainer's model arrives with on_train_begin
                continue
            if name == "merge" and bad is None:
                args = ([None],)
            with pytest.raises(LayerprobeError) as caught:
                function(*args)
            assert "\n" not in str(caught.value), (name, bad)


def test_compare_and_the_settings_check_what_the_cli_checks(tmp_path):
    """compare's tolerance as --tolerance is checked (a dict of known keys, finite numbers >= 0; {} keeps the
    defaults); every settings field given None where its declared default is not None names the field."""
    import dataclasses

    from tests.helpers import DEMO_REFERENCE

    run = DEMO_REFERENCE / "angular"
    assert layerprobe.compare(run, run, {}).exit_code == 0
    assert layerprobe.compare(run, run).exit_code == 0
    for bad, needle in (("0.1", "tolerance must be a dict"), ({"distance": 0.1}, "Unknown tolerance 'distance'"),
                        ({"angular": math.nan}, "finite number >= 0"), ({"angular": -1}, "finite number >= 0"),
                        ({"angular": True}, "got True"), ({"angular": "x"}, "not a number"),
                        ({1: 0.1}, "Unknown tolerance")):
        with pytest.raises(LayerprobeError, match=needle):
            layerprobe.compare(run, run, bad)
    cli = invoke("compare", run, run, "--tolerance", "angular=nan")
    assert_error(cli, "finite number >= 0")
    from layerprobe import ModelOptions

    missing = ModelOptions(str(tmp_path / "none"))
    configs = {"angular": layerprobe.AngularConfig, "prune": layerprobe.PruneConfig, "curve": layerprobe.PruneConfig,
               "gradnorm": layerprobe.GradnormConfig, "export": layerprobe.ExportConfig,
               "heal": layerprobe.HealConfig, "toy": layerprobe.ToyConfig}
    for command, cls in configs.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            if default is None:
                continue
            values = {f.name: None}
            if "model" in {g.name for g in dataclasses.fields(cls)} and f.name != "model":
                values["model"] = missing
            with pytest.raises(LayerprobeError) as caught:
                getattr(layerprobe, command)(cls(**values))
            assert f.name in str(caught.value) and "does not exist" not in str(caught.value), (command, f.name)
    with pytest.raises(LayerprobeError, match="ModelOptions.model is None: pass a model"):
        layerprobe.angular(layerprobe.AngularConfig(model=ModelOptions(model=None)))

def test_heal_says_why_it_has_nothing_to_remove(model_dirs, tmp_path):
    """heal MODEL without --remove, --from-curve or an export: one line saying what MODEL is (no folder here, a
    model folder without the record), never 'got nothing'; before any model loads."""
    cases = {str(tmp_path / "missing"): "is no folder here", "no-such-model": "is no folder here",
             str(model_dirs["llama"]): "is a model folder, not an export (it holds no layerprobe-removal.json)"}
    for model, needle in cases.items():
        result = invoke("heal", model, *TINY, "--out", tmp_path / "h")
        assert_error(result, needle)
        assert "got nothing" not in result.output and "--remove 20-27" in result.output
    assert_error(invoke("heal", model_dirs["llama"], "--remove", "1", "--from-curve", tmp_path, *TINY),
                 "(got --remove and --from-curve)")


def test_a_curves_blocks_outside_the_model_name_the_curve_not_remove():
    """--from-curve whose chosen blocks the model lacks (block 17 of 4): the message names the curve run and its
    curve.csv, never --remove that was not given; --remove keeps its own message."""
    from layerprobe.removal import parse_remove

    for removed, needle in (("17", "is 17, and the model it is applied to has 4 blocks (0..3)"),
                            ("0-3", "keeping none"), ("x3", "item 'x3'")):
        with pytest.raises(LayerprobeError) as caught:
            parse_remove(removed, 4, "runs/curve", "angular")
        text = str(caught.value)
        assert needle in text and "--from-curve 'runs/curve': curve.csv's 'removed'" in text, text
        assert "--remove" not in text
    assert parse_remove("1-2", 4, "runs/curve", "angular") == [1, 2]
    with pytest.raises(LayerprobeError, match="--remove 17 out of range"):
        parse_remove("17", 4)

@pytest.mark.parametrize("given,needle", [
    ({"data": {"tokens": "many"}}, "DataOptions.tokens must be a whole number"),
    ({"tokenz": 5}, "has no setting 'tokenz'. Did you mean: data.tokens?"),
    ({"tokens": 5}, "has no setting 'tokens'. Did you mean: data.tokens?"),
    ({"data": {"seq_lne": 16}}, "has no setting 'data.seq_lne'. Did you mean: data.seq_len?"),
])
def test_resolve_refuses_what_it_would_silently_drop(given, needle):
    """layerprobe.resolve returned tokens='many' for a later failure, and dropped misspelt or misplaced keys."""
    with pytest.raises(LayerprobeError) as caught:
        layerprobe.resolve(layerprobe.AngularConfig, given)
    assert needle in str(caught.value)


def test_compare_max_rows_is_a_count(tmp_path):
    """--max-rows -1 listed all but one failure and then 'and 11 more' of 10: a negative count is refused."""
    from layerprobe.runs.compare import Comparison, render

    run = Path(__file__).resolve().parents[1] / "reports" / "demo" / "angular"
    result = invoke("compare", run, run, "--max-rows", "-1")
    assert result.exit_code == 2 and "--max-rows" in result.output and "Traceback" not in result.output
    with pytest.raises(LayerprobeError, match="--max-rows must be a whole number >= 0"):
        render(Comparison("a", "b"), "text", -1)
