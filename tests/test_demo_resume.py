"""`layerprobe demo --resume` (issue 49): Ctrl-C in the middle of a demo that was redirected to a timestamped
sibling names the exact command that continues it in that sibling; that command keeps the finished sub-runs
(byte for byte, checked), continues the interrupted one from its last save, runs the rest, and ends with the
numbers of an uninterrupted demo. The demo's steps are the real commands on tiny real models (the full demo
takes many minutes): only `demo_steps`, the list of what the demo runs, is swapped."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest

import layerprobe.commands.demo as demo_module
from layerprobe.commands.angular.run import run_angular
from layerprobe.commands.demo import Step
from layerprobe.commands.gradnorm.run import run_gradnorm
from layerprobe.commands.prune.run import run_prune
from layerprobe.config import AngularConfig, DataOptions, GradnormConfig, ModelOptions, PruneConfig
from layerprobe.runs.folder import LOCK

from .helpers import invoke

STOP = {"armed": False}  # Ctrl-C once the prune sweep has saved its first batch's sums (the first run only)


def _prune_then_ctrl_c(config, progress):
    state = Path(config.out) / "state.json"

    def watch(stage, done, total):
        progress(stage, done, total)
        if STOP["armed"] and state.is_file() and json.loads(state.read_text())["sums"]["batches"] >= 1:
            STOP["armed"] = False
            raise KeyboardInterrupt

    return run_prune(config, watch)


def tiny_steps(model: Path):
    def steps(folder: Path, quick: bool):
        data = DataOptions("builtin", tokens=128, seq_len=32, batch_size=2)
        spec = ModelOptions(str(model), dtype="float32", device="cpu")
        angular = AngularConfig(model=spec, data=data, out=str(folder / "angular"), overwrite=True)
        prune = PruneConfig(task="kl", model=spec, data=data, angular=angular.out, out=str(folder / "prune-kl"),
                            overwrite=True)
        gradnorm = GradnormConfig(arch="tiny", seeds=1, batches=1, device="cpu", dtype="float32",
                                  data=DataOptions("builtin", tokens=0, seq_len=16, batch_size=2),
                                  out=str(folder / "gradnorm"), overwrite=True)
        return [Step("angular (tiny)", "angular", angular, run_angular, "angular_tokens"),
                Step("prune kl (tiny)", "prune", prune, _prune_then_ctrl_c, "prune_tokens"),
                Step("gradnorm (tiny)", "gradnorm", gradnorm, run_gradnorm, "seeds")]

    return steps


@pytest.fixture
def tiny_demo(model_dirs, monkeypatch):
    monkeypatch.setattr(demo_module, "demo_steps", tiny_steps(model_dirs["llama"]))


def test_interrupted_redirected_demo_resumes_with_the_command_it_names(tiny_demo, tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # --out taken: the demo goes to a timestamped sibling

    STOP["armed"] = True
    cut = invoke("demo", "--out", out)
    text = " ".join(cut.output.split())
    assert cut.exit_code == 130, cut.output
    sibling = next(p for p in tmp_path.iterdir() if p.name.startswith("demo-"))
    line = f"layerprobe demo --resume --out {sibling}"
    assert f"finished work is kept in {sibling}; `{line}` continues it there" in text, text
    assert str(sibling / "prune-kl") not in text  # the sub-run continues with the demo: one folder, one command
    assert (sibling / LOCK).is_file() and (sibling / "prune-kl" / LOCK).is_file()
    saved = json.loads((sibling / "prune-kl" / "state.json").read_text())  # 1 of the 2 batches of 64 tokens
    assert saved["sums"]["batches"] == 1 and not (sibling / "prune-kl" / "prune.csv").exists()
    angular_bytes = {p.name: p.read_bytes() for p in (sibling / "angular").iterdir()}
    assert "angular.csv" in angular_bytes and not (sibling / "gradnorm").exists()

    words = shlex.split(line)
    resumed = invoke(*words[1:])  # exactly the command the message named
    assert resumed.exit_code == 0, resumed.output
    assert f"kept (finished before, settings checked): {sibling / 'angular'}" in resumed.output
    assert {p.name: p.read_bytes() for p in (sibling / "angular").iterdir()} == angular_bytes
    assert not any(sibling.rglob(LOCK)) and (sibling / "report.html").is_file()
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    whole = invoke("demo", "--out", tmp_path / "whole")  # uninterrupted
    assert whole.exit_code == 0, whole.output
    for table in ("angular/angular.csv", "prune-kl/prune.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(sibling / table), pd.read_csv(tmp_path / "whole" / table))
    grad = ["placement", "seed", "layer", "grad_norm"]
    first, second = (pd.read_csv(f / "gradnorm" / "gradnorm.csv") for f in (sibling, tmp_path / "whole"))
    pd.testing.assert_frame_equal(first[[c for c in grad if c in first]], second[[c for c in grad if c in second]])


def test_resumed_demo_overall_bar_starts_where_the_cut_step_began(tiny_demo, tmp_path):
    """A --resume's kept steps report nothing: the overall bar's first value is the point the interrupted demo's
    bar stood at when the cut step began, so its rate and ETA count only the work done now (the README demo,
    resumed after 4 kept steps, said 'eta 0:00:13' for 8 minutes of work when the kept steps moved the bar at once)."""
    from layerprobe.commands.demo import OVERALL, run_demo

    cut, resumed = [], []
    STOP["armed"] = True
    with pytest.raises(KeyboardInterrupt):
        run_demo(str(tmp_path / "demo"), progress=lambda *call: cut.append(call))
    began = next(i for i, (stage, _, _) in enumerate(cut) if stage.startswith("step 2/3, prune kl (tiny)"))
    at_cut = [done for stage, done, _ in cut[:began] if stage == OVERALL][-1]
    assert 0 < at_cut < 1000

    run_demo(str(tmp_path / "demo"), progress=lambda *call: resumed.append(call), resume=True)
    assert resumed[0] == (OVERALL, at_cut, 1000), resumed[:3]
    assert not any(stage.startswith("step 1/3") for stage, _, _ in resumed)  # the kept step moved nothing
    overall = [done for stage, done, _ in resumed if stage == OVERALL]
    assert overall == sorted(overall) and overall[-1] == 1000


def test_demo_resume_refusals(tiny_demo, tmp_path):
    missing = invoke("demo", "--resume", "--out", tmp_path / "nowhere")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    done = invoke("demo", "--out", tmp_path / "done")
    assert done.exit_code == 0, done.output
    again = invoke("demo", "--resume", "--out", tmp_path / "done")
    assert again.exit_code == 2 and "holds a finished demo: nothing to resume" in " ".join(again.output.split())
    both = invoke("demo", "--resume", "--overwrite", "--out", tmp_path / "done")
    assert both.exit_code == 2 and "pass one of them" in both.output
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    foreign = invoke("demo", "--resume", "--out", other)
    assert foreign.exit_code == 2 and "not a layerprobe demo run" in " ".join(foreign.output.split())
    assert (other / "notes.txt").read_text() == "mine"


TINY = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "2", "--device", "cpu"]
COMMANDS = {
    "angular": lambda model: ["angular", model, *TINY],
    "prune": lambda model: ["prune", model, "--task", "kl", *TINY],
    "curve": lambda model: ["prune", model, "--task", "kl", "--curve", "--strategies", "bi,last", "--max-removed", "2",
                            *TINY],
    "heal": lambda model: ["heal", model, "--remove", "1", "--dataset", "builtin", "--tokens", "256", "--seq-len", "32",
                           "--batch-size", "4", "--steps", "4", "--lora-rank", "4", "--eval-every", "2", "--no-gain"],
    "gradnorm": lambda model: ["gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", "1", "--batches", "1",
                               "--dataset", "builtin", "--seq-len", "16", "--batch-size", "2"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_ctrl_c_after_a_redirect_names_the_command_that_resumes_in_the_sibling(name, model_dirs, tmp_path,
                                                                                monkeypatch):
    """Ctrl-C at a command's first progress, its --out taken (so it wrote to a timestamped sibling): the message
    names the sibling and a command line; that very line, run, finishes the run there."""
    from layerprobe.cli import common

    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = [str(a) for a in COMMANDS[name](model_dirs["llama"])]
    real = common.LogProgress.__call__

    def ctrl_c(self, stage, done, total):
        raise KeyboardInterrupt

    monkeypatch.setattr(common.LogProgress, "__call__", ctrl_c)
    cut = invoke(*args, "--out", out)
    text = " ".join(cut.output.split())
    assert cut.exit_code == 130, cut.output
    sibling = next(p for p in tmp_path.iterdir() if p.name.startswith("run-"))
    line = shlex.join(["layerprobe", *args, "--resume", "--out", str(sibling)])
    assert f" in {sibling}; `{line}` continues it there." in text, text

    monkeypatch.setattr(common.LogProgress, "__call__", real)
    resumed = invoke(*shlex.split(line)[1:])
    assert resumed.exit_code == 0, resumed.output
    assert (sibling / "summary.json").is_file() and not (sibling / LOCK).exists()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_ctrl_c_in_a_command_without_resume_says_so(tmp_path, monkeypatch):
    """toy measures first and claims its folder at the end: Ctrl-C leaves nothing and says so. A command line
    without --resume that left a claimed folder (merge, toy at its end) is told to run again or replace it."""
    from layerprobe.cli import common
    from layerprobe.cli.argv import COMMAND_LINE
    from layerprobe.commands.prune import PRUNE_COMMAND
    from layerprobe.runs.folder import prepare_run_dir

    def ctrl_c(self, stage, done, total):
        if done > 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(common.LogProgress, "__call__", ctrl_c)
    cut = invoke("toy", "--depth", 4, "--width", 8, "--samples", 16, "--out", tmp_path / "toy")
    assert cut.exit_code == 130 and not (tmp_path / "toy").exists()
    assert "nothing was written (stopped before the run folder was claimed): run the same command again." in \
        " ".join(cut.output.split())

    monkeypatch.setattr(common.LogProgress, "__call__", lambda *a: None)
    folder = prepare_run_dir(tmp_path / "merged", command=PRUNE_COMMAND)
    (folder / "prune.csv").write_text("removed\n1\n")
    monkeypatch.setitem(COMMAND_LINE, "words", ["merge", "a", "b", "--out", str(folder)])
    monkeypatch.setitem(COMMAND_LINE, "resumes", False)
    text = " ".join(common.interrupted_text().split())
    assert text == (f"finished work is kept in {folder}; this command has no --resume: run it again (a new folder), "
                    f"or with --overwrite --out {folder} to replace it."), text
