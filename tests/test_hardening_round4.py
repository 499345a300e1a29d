"""Issue 41, one test per rule enumerating its surface (every command, the library API, the training callbacks):
--overwrite and --resume only touch folders layerprobe wrote for the same command; a diverging rate is an error
naming it; the library checks what the CLI checks; records read as input are verified; unwritable --out is one line;
the GGUF cache is verified as a whole."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import layerprobe
from layerprobe import LayerprobeError
from layerprobe.errors import article
from tests.helpers import assert_error, invoke

TINY = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"]
RUNS = {  # command -> a tiny run of it, without --out ({model}: the tiny LLaMA)
    "angular": ["angular", "{model}", *TINY, "--lens-tokens", "0"],
    "prune": ["prune", "{model}", "--task", "kl", *TINY],
    "curve": ["prune", "{model}", "--task", "kl", "--curve", "--strategies", "last", "--max-removed", "1", *TINY],
    "heal": ["heal", "{model}", "--remove", "1", "--steps", "1", "--no-gain", "--dtype", "float32", *TINY],
    "gradnorm": ["gradnorm", "--arch", "tiny", "--seeds", "1", "--batches", "1", "--norm", "pre", "--dataset",
                 "builtin", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"],
    "toy": ["toy", "--depth", "3", "--width", "8", "--samples", "16"],
    "export": ["export", "{model}", "--remove", "1", "--device", "cpu", "--dtype", "float32"],
}
RESUMABLE = ("angular", "prune", "curve", "heal", "gradnorm")
FOREIGN = {"summary.json": '{"mine": true}\n', "prune.csv": "a,b\n1,2\n", "monitor.csv": "step\n1\n",
           "merged/mine.bin": "weights"}


def run_args(command: str, model_dirs, out, *extra) -> list:
    return [a.format(model=model_dirs["llama"]) for a in RUNS[command]] + ["--out", str(out), *extra]


def listing(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    for name, text in FOREIGN.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


# ---- rule 1: ownership -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--overwrite", "--resume"])
@pytest.mark.parametrize("command", list(RUNS))
def test_a_users_folder_is_never_overwritten_or_resumed(command, flag, model_dirs, tmp_path):
    if flag == "--resume" and command not in RESUMABLE:
        pytest.skip(f"{command} has no --resume")
    folder = user_folder(tmp_path)
    before = listing(folder)
    result = invoke(*run_args(command, model_dirs, folder, flag))
    assert_error(result, "did not write")
    assert listing(folder) == before
    assert not (folder / ".layerprobe.lock").exists()


def test_the_library_and_the_training_callbacks_refuse_a_users_folder(model_dirs, tokenizer, tmp_path):
    import transformers

    from layerprobe import (AngularConfig, DataOptions, GradnormConfig, HealConfig, LayerMonitor,
                            LayerprobeCallback, ModelOptions, PruneConfig)

    folder = user_folder(tmp_path)
    before = listing(folder)
    model = ModelOptions(str(model_dirs["llama"]), device="cpu")
    data = DataOptions("builtin", tokens=64, seq_len=16, batch_size=2)
    calls = {
        "angular": lambda: layerprobe.angular(AngularConfig(model=model, data=data, out=str(folder), overwrite=True)),
        "prune": lambda: layerprobe.prune(PruneConfig(model=model, data=data, task="kl", out=str(folder),
                                                      resume=True)),
        "heal": lambda: layerprobe.heal(HealConfig(model=model, data=data, remove="1", out=str(folder),
                                                   overwrite=True)),
        "gradnorm": lambda: layerprobe.gradnorm(GradnormConfig(arch="tiny", out=str(folder), overwrite=True)),
    }
    for name, call in calls.items():
        with pytest.raises(LayerprobeError, match="did not write"):
            call()
    net = transformers.AutoModelForCausalLM.from_pretrained(model_dirs["llama"])
    with pytest.raises(LayerprobeError, match="did not write"):
        LayerMonitor(net, tokenizer, out=str(folder), overwrite=True, dataset="builtin", tokens=32, seq_len=16)
    callback = LayerprobeCallback(tokenizer, out=str(folder), overwrite=True, dataset="builtin", tokens=32, seq_len=16)
    with pytest.raises(LayerprobeError, match="did not write"):
        callback.on_train_begin(SimpleNamespace(max_grad_norm=1.0, gradient_accumulation_steps=1),
                                SimpleNamespace(global_step=0), None, model=net)
    assert listing(folder) == before


SINGLE_FILES = {  # every command that writes a file at a path the user names -> (its args, the file, then its own)
    "report.html": (lambda run, out: ["report", run, "--out", out], "report.html"),
    "report.md": (lambda run, out: ["report", run, "--out", out], "report.md"),
    "report_files": (lambda run, out: ["report", run, "--out", out], "report_files/angular_0_heatmap.png"),
    **{f"compare-{fmt}": (lambda run, out, fmt=fmt: ["compare", run, run, "--format", fmt, "--out",
                                                     Path(out) / "verdict"], "verdict") for fmt in
       ("text", "markdown", "json", "junit")},
    "compare-output": (lambda run, out: ["compare", run, run, "--output", Path(out) / "verdict"], "verdict"),
}


@pytest.mark.parametrize("case", list(SINGLE_FILES))
def test_a_users_file_is_never_overwritten_by_a_single_file_output(case, tmp_path):
    """report --out DIR over a user's report.html / report.md / report_files/, compare --out FILE (every --format,
    the old --output) over a user's file: refused, the file as it was; --overwrite replaces it; layerprobe's own
    earlier output is replaced without it (a CI job reruns)."""
    from tests.helpers import DEMO_REFERENCE

    args, name = SINGLE_FILES[case]
    run = tmp_path / "angular"
    shutil.copytree(DEMO_REFERENCE / "angular", run)
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True)
    (out / name).write_text("mine\n")
    assert_error(invoke(*args(run, out)), f"'{out / name}' is already there and layerprobe did not write it")
    assert (out / name).read_text() == "mine\n"
    assert invoke(*args(run, out), "--overwrite").exit_code in (0, 1)
    assert case == "report_files" or (out / name).read_text() != "mine\n"  # a figure this run lacks: left
    again = invoke(*args(run, out))  # its own: replaced without --overwrite
    assert again.exit_code in (0, 1), again.output


def test_a_manifest_without_files_counts_only_when_its_summary_agrees(tmp_path):
    """A manifest.json without 'files' (older runs, such as every committed reports/ run) is layerprobe's record
    only beside a summary.json of the same command agreeing with it; a hand-made {"command": ...} is not, for
    every command, for --overwrite and --resume."""
    from tests.helpers import DEMO_REFERENCE

    from layerprobe.runs.folder import check_owned
    from layerprobe.errors import RunError

    for run in sorted(p.parent for p in DEMO_REFERENCE.rglob("manifest.json")):  # older runs: still theirs
        manifest = json.loads((run / "manifest.json").read_text())
        assert "files" not in manifest
        check_owned(run, manifest["command"], "--overwrite")
    for command in ("angular", "prune", "curve", "heal", "gradnorm", "toy", "monitor"):
        for summary in (None, {"command": command}, {"command": command, "model": "x"}):
            folder = tmp_path / f"{command}-{len(summary or ())}"
            folder.mkdir()
            (folder / "manifest.json").write_text(json.dumps({"command": command}))
            if summary is not None:
                (folder / "summary.json").write_text(json.dumps(summary))
            (folder / "notes.txt").write_text("mine")
            for flag in ("--overwrite", "--resume"):
                with pytest.raises(RunError, match="lists no files and no summary.json of the same run agrees"):
                    check_owned(folder, command, flag)
    forged = tmp_path / "forged"  # a layerprobe-looking manifest whose summary disagrees
    shutil.copytree(DEMO_REFERENCE / "angular", forged)
    summary = json.loads((forged / "summary.json").read_text())
    (forged / "summary.json").write_text(json.dumps({**summary, "model": "another"}))
    with pytest.raises(RunError, match="not a layerprobe angular run"):
        check_owned(forged, "angular", "--overwrite")


@pytest.mark.slow  # each command runs twice on a tiny model
@pytest.mark.parametrize("command", list(RUNS))
def test_overwrite_replaces_its_own_run_and_refuses_a_planted_file(command, model_dirs, tmp_path):
    out = tmp_path / "run"
    first = invoke(*run_args(command, model_dirs, out))
    assert first.exit_code == 0, first.output
    planted = out / ("merged/mine.bin" if command == "heal" else "mine.bin")
    planted.write_text("mine")
    assert_error(invoke(*run_args(command, model_dirs, out, "--overwrite")), "mine.bin")
    assert planted.read_text() == "mine"
    planted.unlink()
    again = invoke(*run_args(command, model_dirs, out, "--overwrite"))
    assert again.exit_code == 0, again.output
    if command == "angular":  # a report written into the run is layerprobe's too
        assert invoke("report", out, "--out", out).exit_code == 0
        assert invoke(*run_args(command, model_dirs, out, "--overwrite")).exit_code == 0
    if command != "export":
        other = "prune" if command == "angular" else "angular"
        flag = "--resume" if other in RESUMABLE else "--overwrite"
        assert_error(invoke(*run_args(other, model_dirs, out, flag)), f"not {article(other)} {other} run")


# ---- rule 2: a NaN or infinite result is an error ------------------------------------------------------------------

@pytest.mark.slow  # a healing step or curve per case on a tiny model
@pytest.mark.parametrize("args,flag", [
    (["heal", "--lr", "1e30"], "--lr"),
    (["heal", "--lr", "inf"], "--lr"),
    (["curve", "--heal-steps", "1", "--heal-lr", "1e30"], "--heal-lr"),
    (["heal", "--lora-alpha", "1e30"], "--lora-alpha"),  # an infinite gradient norm: clipped, it zeroes every step
])
def test_a_diverging_rate_is_an_error_naming_it(args, flag, model_dirs, tmp_path):
    out = tmp_path / "run"
    result = invoke(*run_args(args[0], model_dirs, out, *args[1:]))
    assert_error(result, flag)
    assert "checkpoint" not in result.output.split("error:")[1]
    assert not (out / "summary.json").exists() and not (out / "merged").exists()


def test_a_non_finite_healing_step_names_its_cause():
    """Every place heal_loop stops, and the setting each names: the checkpoint before any update (step-0 scores,
    the first loss), --lora-alpha where it scales the update far past the usual, else the rate."""
    from layerprobe.repair.loop import _check_step, _diverged
    from layerprobe.config import HealConfig
    from layerprobe.errors import NumericsError

    from layerprobe import ModelOptions

    ckpt = ModelOptions("ckpt")
    base = HealConfig(model=ckpt, remove="1")
    big = HealConfig(model=ckpt, remove="1", lora_alpha=1e30)
    tail = HealConfig(model=ckpt, remove="1", lora_alpha=1e30, method="tail")
    cases = [  # (call, what the message names, what it must not)
        (lambda: _diverged("scores nan", 0, big, "--lr", "torch.float32"), "checkpoint 'ckpt'", "--lora-alpha"),
        (lambda: _check_step(big, 1, "--lr", "torch.float32", math.nan, None), "checkpoint 'ckpt'", "--lora-alpha"),
        (lambda: _check_step(base, 1, "--lr", "torch.float16", 1.0, math.inf), "--dtype float32", "--lr"),
        (lambda: _check_step(big, 1, "--lr", "torch.float32", 1.0, math.inf), "--lora-alpha 1e+30", "checkpoint"),
        (lambda: _check_step(big, 3, "--lr", "torch.float32", math.nan, None), "--lora-alpha 1e+30", "--lr "),
        (lambda: _check_step(base, 3, "--lr", "torch.float32", 1.0, math.nan), "--lr 0.0002", "checkpoint"),
        (lambda: _check_step(tail, 3, "--lr", "torch.float32", math.inf, None), "--lr 0.0002", "--lora-alpha"),
        (lambda: _check_step(base, 2, "--heal-lr", "torch.float32", math.inf, None), "--heal-lr", "checkpoint"),
    ]
    for call, names, never in cases:
        with pytest.raises(NumericsError) as caught:
            error = call()
            if isinstance(error, NumericsError):
                raise error
        assert names in str(caught.value) and never not in str(caught.value), str(caught.value)
    _check_step(base, 1, "--lr", "torch.float32", 1.0, 1e6)  # finite: goes on


def test_a_non_finite_repair_score_is_an_error(model_dirs):
    """lstsq/cosine: held-out scores of the folded model (heal) that come out NaN are one line naming the cause
    (the maps: --ridge; the checkpoint before any map: --dtype float32), never a merged/ scored NaN."""
    import torch
    import transformers

    from layerprobe.repair.replace import paired_scores
    from layerprobe.errors import NumericsError

    heldout = [SimpleNamespace(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6]]))]

    def model():
        return transformers.AutoModelForCausalLM.from_pretrained(model_dirs["llama"]).eval()

    def score(teacher, student):
        return paired_scores(teacher, student, "model.layers", [2], heldout, "cpu")

    good = model()
    assert set(score(good, model())) == {"before", "after", "unpruned"}
    nan_teacher, inf_fold = model(), model()
    nan_teacher.model.embed_tokens.weight.data.fill_(math.nan)
    inf_fold.model.layers[1].mlp.down_proj.weight.data.fill_(math.inf)  # the projection the map of block 2 folds into
    with pytest.raises(NumericsError, match="before any map"):
        score(nan_teacher, model())
    with pytest.raises(NumericsError, match="the folded maps make it: raise --ridge"):
        score(good, inf_fold)


@pytest.fixture(scope="module")
def broken_weights(model_dirs, tmp_path_factory):
    """The tiny LLaMA with a NaN in one tensor, and with every weight scaled by 1e38 (finite, but no norm survives:
    every logit comes out 0 and every kl 0)."""
    from safetensors.torch import load_file, save_file

    folders = {}
    for name, change in (("nan", "nan"), ("scaled", "scale")):
        folder = tmp_path_factory.mktemp(name)
        shutil.copytree(model_dirs["llama"], folder, dirs_exist_ok=True)
        tensors = load_file(folder / "model.safetensors")
        if change == "nan":
            tensors["model.layers.2.mlp.up_proj.weight"][0, 0] = math.nan
        else:
            tensors = {k: v * 1e38 for k, v in tensors.items()}
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        folders[name] = folder
    return folders


@pytest.mark.parametrize("command", ["angular", "prune", "curve", "heal", "export"])
def test_a_broken_checkpoint_is_named_by_every_command(command, broken_weights, tmp_path):
    """Every command that loads a model: the checkpoint and the tensor, before any forward (never a ranking of
    zeros, nor a healing blamed on --lr, nor an export blamed on the architecture)."""
    for kind, tensor in (("nan", "layers.2.mlp.up_proj.weight"), ("scaled", "embed_tokens.weight")):
        args = run_args(command, {"llama": broken_weights[kind]}, tmp_path / kind)
        result = invoke(*args)
        assert_error(result, f"has {'NaN or infinite values' if kind == 'nan' else 'values up to'}")
        assert tensor in result.output and "--lr" not in result.output and "architecture" not in result.output
        assert not (tmp_path / kind).exists()


def test_a_non_finite_score_is_never_ranked():
    """The sweep paths a checked forward does not cover: an evaluation's scores (lm-eval, SQuAD) and an lm-eval
    multiple-choice loglikelihood (argmax would still pick a choice) are one line, never a row."""
    from layerprobe.commands.prune.sweeps import _check_finite, _check_scores
    from layerprobe.errors import NumericsError
    from layerprobe.evaluation.records import _choice_fields
    from layerprobe.evaluation.taskfree import Sums

    loaded = SimpleNamespace(spec="ckpt", dtype="float32")
    _check_scores({"acc": (0.5, 0.1), "acc_stderr_missing": (0.5, math.nan)}, None, loaded)
    for scores, label in (({"acc": (math.nan, 0.1)}, None), ({"f1": (math.inf, 0.0)}, "1")):
        with pytest.raises(NumericsError, match="'ckpt' scores a NaN"):
            _check_scores(scores, label, loaded)
    for sums in (Sums([math.nan, 3], {}), Sums([1.0, 3], {"2": [math.inf, 3]})):
        with pytest.raises(NumericsError, match="'ckpt'"):
            _check_finite(sums, "kl", 0, loaded)
    task = SimpleNamespace(doc_to_choice=lambda doc: ["a", "b"], config=SimpleNamespace(task="arc_easy"))
    sample = {"doc": {}, "doc_id": 4, "target": 0, "filtered_resps": [(math.nan, False), (-1.0, False)]}
    with pytest.raises(NumericsError, match="document 4 of arc_easy"):
        _choice_fields(sample, task)


# ---- impossible token counts: one position has no next-token target ------------------------------------------------

def _with(args: list, option: str, value: str) -> list:
    args = list(args)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


@pytest.mark.parametrize("command", ["angular", "prune", "curve", "heal", "gradnorm", "ppl", "drift"])
def test_fewer_than_two_positions_are_refused_naming_the_option(command, model_dirs, tmp_path):
    """Every command reading a corpus: --tokens 1 (ppl 1.0 and an invented ranking) or --seq-len 1 is one line
    naming the option and the minimum, before the model loads; the library and the training callback alike."""
    base = {"ppl": ["prune", "{model}", "--task", "ppl", *TINY], "drift": ["prune", "{model}", "--task", "drift",
                                                                        *TINY]}.get(command) or RUNS[command]
    base = [a.format(model=model_dirs["llama"]) for a in base] + ["--out", str(tmp_path / "run")]
    options = ["--seq-len"] if command == "gradnorm" else ["--tokens", "--seq-len"]
    for option in options:
        for value in ("1", "0"):
            assert_error(invoke(*_with(base, option, value)), f"{option} must be at least 2, got {value}")
    assert not (tmp_path / "run").exists()


def test_the_library_refuses_fewer_than_two_positions(tmp_path):
    from layerprobe import AngularConfig, DataOptions, ModelOptions, PruneConfig

    model = ModelOptions(str(tmp_path / "no-such-model"))
    for data in (DataOptions("builtin", tokens=1), DataOptions("builtin", seq_len=1)):
        with pytest.raises(LayerprobeError, match="must be at least 2"):
            layerprobe.angular(AngularConfig(model=model, data=data))
        with pytest.raises(LayerprobeError, match="must be at least 2"):
            layerprobe.prune(PruneConfig(model=model, data=data, task="ppl"))
    with pytest.raises(LayerprobeError, match="tokens must be at least 2"):
        layerprobe.LayerMonitor(None, None, tokens=1)


def test_a_last_sequence_without_a_target_costs_no_interval():
    """ppl of --tokens 49 at --seq-len 16: the last sequence holds one position, no next-token target; its 0 / 0
    is left out of the records (it adds nothing to the score), so the intervals stay."""
    from layerprobe.evaluation.records import sequence_rows

    rows = sequence_rows("ppl", [[10.0, 15], [12.0, 15], [0.0, 0]])
    assert [(r["doc_id"], r["tokens"], r["total"]) for r in rows] == [(0, 15, 10.0), (1, 15, 12.0)]


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


OUT_COMMANDS = {  # every command with an --out: its arguments
    "angular": ["angular", "x"], "prune": ["prune", "x", "--task", "kl"], "heal": ["heal", "x", "--remove", "1"],
    "export": ["export", "x", "--remove", "1"], "gradnorm": ["gradnorm", "--arch", "tiny"], "toy": ["toy"],
    "report": ["report", "{run}"], "compare": ["compare", "{run}", "{run}"], "merge": ["merge", "{run}", "{run}"],
    "demo": ["demo", "--quick"],
}


@pytest.mark.parametrize("command", list(OUT_COMMANDS))
def test_an_empty_out_is_refused_never_the_default(command, tmp_path):
    """--out "" (a script's unset variable) is one line, never a run written to the default folder."""
    from tests.helpers import DEMO_REFERENCE

    args = [a.format(run=DEMO_REFERENCE / "angular") for a in OUT_COMMANDS[command]]
    flags = ["--out", "--output"] if command == "compare" else ["--out"]
    for flag in flags:
        for empty in ("", "  "):
            assert_error(invoke(*args, flag, empty), "empty path")
    assert not Path("reports").exists()


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


# ---- rule 5: unwritable destinations -------------------------------------------------------------------------------

@pytest.mark.slow  # prune and heal load the tiny model before they claim --out
@pytest.mark.parametrize("command", list(RUNS))
def test_an_unwritable_out_is_one_line(command, model_dirs, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    targets = [blocked / "x", "/proc/layerprobe-x"]
    if os.geteuid() != 0:  # root writes into a read-only folder: only testable as a user
        readonly = tmp_path / "ro"
        readonly.mkdir(mode=0o555)
        targets.append(readonly / "x")
    for target in targets:
        result = invoke(*run_args(command, model_dirs, target))
        assert_error(result, "--out")
        assert "Traceback" not in result.output


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


# ---- the independent replay's last cases (session 13) ---------------------------------------------------------------

@pytest.mark.parametrize("norm", ["pre", "post"])
def test_a_toy_branch_scale_that_overflows_is_one_line_from_cli_and_library(norm, tmp_path):
    """--branch-scale 1e30 overflows float32 inside the blocks: the SVD of the effective rank raised a LinAlgError
    traceback; now one line naming the option, and no folder."""
    result = invoke("toy", "--depth", 4, "--width", 8, "--samples", 16, "--norm", norm, "--branch-scale", "1e30",
                    "--out", tmp_path / "cli")
    assert_error(result, "--branch-scale 1e+30 overflows float32")
    assert not (tmp_path / "cli").exists()
    with pytest.raises(LayerprobeError, match="use a smaller --branch-scale"):
        layerprobe.toy(layerprobe.ToyConfig(norms=(norm,), depth=4, width=8, samples=16, alphas=(1e30,),
                                            out=str(tmp_path / "lib")))
    assert not (tmp_path / "lib").exists()


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


def test_a_gradnorm_training_that_diverges_names_lr_not_the_checkpoint(tmp_path):
    """--arch tiny has no checkpoint to blame: numbers finite at step 0 and not after training are the rate's."""
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--dataset", "builtin", "--device", "cpu",
                    "--seeds", 1, "--batches", 1, "--seq-len", 16, "--batch-size", 2, "--steps", 3, "--lr", "1e30",
                    "--out", tmp_path / "gn")
    assert_error(result, "the training diverged at --lr 1e+30: lower --lr")
    assert "checkpoint" not in result.output
