"""Issue 41 rules 1 and 5, enumerated over every command, the library API and the training callbacks: --overwrite
and --resume only touch folders layerprobe wrote for the same command, a single-file output never replaces a user's
file, an empty --out is refused, an unwritable --out is one line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import layerprobe
from layerprobe import LayerprobeError
from layerprobe.errors import article
from tests.helpers import assert_error, invoke
from tests.every_command import RESUMABLE, RUNS, listing, run_args, user_folder


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
    if command == "angular":  # a report written into the run is layerprobe's too, but not the run's: kept, unlisted
        assert invoke("report", out, "--out", out).exit_code == 0
        assert invoke(*run_args(command, model_dirs, out, "--overwrite")).exit_code == 0
        assert (out / "report.html").is_file() and any((out / "report_files").iterdir())
        listed = json.loads((out / "manifest.json").read_text())["files"]
        assert not [name for name in listed if name.startswith("report")], listed
    if command != "export":
        other = "prune" if command == "angular" else "angular"
        flag = "--resume" if other in RESUMABLE else "--overwrite"
        assert_error(invoke(*run_args(other, model_dirs, out, flag)), f"not {article(other)} {other} run")

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


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_verdict_never_goes_inside_a_third_run(overwrite, tmp_path):
    """compare --out onto a file of a run it does not compare (another run's summary.json, one its manifest lists)
    or a new file inside that run: refused, with --overwrite too, the run as it was (an independent replay found the
    summary replaced by the verdict text, exit 0); beside the runs it is written."""
    from tests.helpers import DEMO_REFERENCE

    run, third = tmp_path / "angular", tmp_path / "third"
    shutil.copytree(DEMO_REFERENCE / "angular", run)
    shutil.copytree(DEMO_REFERENCE / "angular", third)
    before = {p.name: p.read_bytes() for p in third.iterdir() if p.is_file()}
    more = ["--overwrite"] if overwrite else []
    for out in (third / "summary.json", third / "verdict.txt"):
        assert_error(invoke("compare", run, run, "--out", out, *more), f"lies inside the layerprobe run '{third}'")
    assert {p.name: p.read_bytes() for p in third.iterdir() if p.is_file()} == before
    assert invoke("compare", run, run, "--out", tmp_path / "verdict.txt", *more).exit_code == 0
