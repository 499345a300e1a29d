"""Resume and run folders: a resume with other settings or weights is refused, a cut-off row is redone, an angular
pass resumes to the uninterrupted numbers; two runs on one --out keep both, unfinished and foreign folders, file
modes, a full disk, unusable outputs; and inputs that would give wrong numbers (float16 overflow, missing weights)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from layerprobe.errors import RunError
import torch
import transformers
from safetensors.torch import load_file, save_file
from layerprobe.runs.folder import LOCK
from layerprobe.runs.resume import Ledger

from .conftest import tiny_config
from .helpers import assert_error, invoke

TINY = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "2", "--device", "cpu"]


def saved_llama(folder, tokenizer, scale=1.0, layers=4, base=False):
    torch.manual_seed(0)
    config = tiny_config("llama", len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id, layers=layers)
    model = (transformers.LlamaModel if base else transformers.LlamaForCausalLM)(config)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(scale)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_float16_overflow_is_named_not_measured(tokenizer, tmp_path):
    folder = saved_llama(tmp_path / "hot", tokenizer, scale=1e6)  # embeddings beyond float16's 65504
    for command in (["angular"], ["prune", "--task", "ppl"], ["prune", "--task", "kl"]):
        result = invoke(*command, folder, *TINY, "--dtype", "float16", "--out", tmp_path / command[-1])
        assert_error(result, "NaN or infinite values in model.embed_tokens.weight at float16")  # as loaded
        assert "--dtype float32" in result.output
    # the default run folder: a failed run leaves no empty reports/<model>/ behind, and a folder that was there stays
    assert_error(invoke("angular", folder, *TINY, "--dtype", "float16"), "NaN or infinite")
    assert not Path("reports").exists()
    Path("reports").mkdir()
    assert_error(invoke("angular", folder, *TINY, "--dtype", "float16"), "NaN or infinite")
    assert Path("reports").is_dir() and not any(Path("reports").iterdir())
    assert invoke("angular", folder, *TINY, "--dtype", "float32", "--out", tmp_path / "ok").exit_code == 0


def test_missing_layer_weights_are_an_error(tokenizer, tmp_path):
    folder = saved_llama(tmp_path / "m", tokenizer)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 6  # the weights hold 4
    (folder / "config.json").write_text(json.dumps(config))
    assert_error(invoke("angular", folder, *TINY, "--out", tmp_path / "a"), "layers.4.")
    config["num_hidden_layers"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if ".layers.3." not in k}, folder / "model.safetensors",
              metadata={"format": "pt"})
    assert_error(invoke("prune", folder, "--task", "kl", *TINY, "--out", tmp_path / "p"),
                 "randomly initialized and measured")
    assert invoke("gradnorm", folder, "--reinit", "--seeds", "1", "--batches", "1", "--dataset", "builtin",
                  "--seq-len", "32", "--batch-size", "2", "--out", tmp_path / "g").exit_code == 0  # rebuilds weights


@pytest.mark.parametrize("changed", [["--batch-size", "4"], ["--dtype", "bfloat16"], ["--tokens", "256"],
                                     ["--text-field", "body"], ["--no-shared-prefix"]])
def test_resume_with_other_settings_is_refused(changed, model_dirs, tmp_path):
    base = ["prune", model_dirs["llama"], "--task", "kl", *TINY, "--dtype", "float32", "--out", tmp_path / "run"]
    assert invoke(*base).exit_code == 0
    result = invoke(*base, "--resume", *changed)
    assert_error(result, "different settings")


def test_weights_changed_at_the_same_path_refuse_a_resume(tokenizer, tmp_path):
    folder = saved_llama(tmp_path / "w", tokenizer)
    base = ["prune", folder, "--task", "kl", *TINY, "--out", tmp_path / "run"]
    assert invoke(*base).exit_code == 0
    saved_llama(folder, tokenizer, scale=2.0)
    assert_error(invoke(*base, "--resume"), "different settings (weights:")


def test_a_cut_off_row_is_dropped_and_redone(tmp_path):
    columns = ["layer", "block", "removed", "metric", "baseline", "pruned", "delta", "baseline_stderr", "pruned_stderr"]
    (tmp_path / "state.json").write_text(json.dumps({"identity": {"task": "t"}, "baseline": {"acc": [0.5, None]}}))
    (tmp_path / "prune.csv").write_text(",".join(columns) + "\n0,1,0,acc,0.5,0.25,-0.25,,\n1,1,1,acc,0.5,")
    ledger = Ledger(tmp_path, {"task": "t"}, resume=True, columns=columns, table="prune")
    assert ledger.done() == {"0"}


def test_two_runs_on_one_out_keep_both(model_dirs, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "layerprobe", "prune", str(model_dirs["llama"]), "--task", "kl", *TINY,
           "--out", str(tmp_path / "shared")]
    runs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stdout.read().decode()
    folders = sorted(p for p in tmp_path.iterdir() if p.name.startswith("shared"))
    assert len(folders) == 2, folders  # the second run got its own sibling: nothing overwritten
    for folder in folders:
        assert (folder / "summary.json").is_file() and not (folder / LOCK).exists()
        assert len(pd.read_csv(folder / "prune.csv")) == 4


def test_unfinished_and_foreign_folders(model_dirs, tmp_path):
    angular = tmp_path / "angular"
    assert invoke("angular", model_dirs["llama"], *TINY, "--out", angular).exit_code == 0
    assert_error(invoke("prune", model_dirs["llama"], "--task", "kl", *TINY, "--resume", "--out", angular),
                 "holds an angular run, not a prune run")
    summary = json.loads((angular / "summary.json").read_text())
    assert summary["command"] == "angular"  # untouched
    (angular / LOCK).write_text(f"999999999@{socket.gethostname()}\n")  # a run killed while writing
    assert_error(invoke("report", angular), "is an unfinished run")
    assert_error(invoke("compare", angular, angular), "is an unfinished run")


def test_files_follow_the_umask(model_dirs, tmp_path):
    out = tmp_path / "run"
    code = ("import os, sys; os.umask(0o022); from layerprobe.cli import main; sys.argv = sys.argv[1:]; main()")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code, "layerprobe", "toy", "--depth", "4", "--width", "8", "--samples", "16",
                    "--out", str(out)], env=env, check=True, capture_output=True)
    for name in ("toy.csv", "toy.png", "summary.json", "manifest.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name


def test_unusable_outputs_and_devices(model_dirs, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert_error(invoke("angular", model_dirs["llama"], *TINY, "--out", blocker / "run"), "cannot be created or written")
    assert_error(invoke("angular", model_dirs["llama"], *TINY[:-2], "--device", "mps", "--out", tmp_path / "m"),
                 "no Apple GPU")
    run = tmp_path / "ok"
    assert invoke("angular", model_dirs["llama"], *TINY, "--out", run).exit_code == 0
    assert_error(invoke("report", run, "--out", blocker), "cannot be created or written")
    assert_error(invoke("compare", run, run, "--output", blocker / "x.txt"), "cannot be written")
    assert_error(invoke("gradnorm", "--arch", "tiny", "--steps", "2", "--lr", "nan", "--dataset", "builtin",
                        "--out", tmp_path / "g"), "--lr must be a positive number")
    assert not (tmp_path / "g").exists()


def test_misleading_hints_fixed(tokenizer, model_dirs, tmp_path):
    odd = tmp_path / "remote"
    saved_llama(odd, tokenizer)
    config = json.loads((odd / "config.json").read_text())
    config.update(model_type="my_private_arch", auto_map={"AutoConfig": "configuration_x.XConfig"})
    (odd / "config.json").write_text(json.dumps(config))
    assert_error(invoke("angular", odd, *TINY, "--out", tmp_path / "a"), "pass --trust-remote-code")
    one = saved_llama(tmp_path / "one", tokenizer, layers=1)
    assert_error(invoke("prune", one, "--task", "kl", *TINY, "--out", tmp_path / "p"), "needs a model of 2 or more")
    bare = saved_llama(tmp_path / "bare", tokenizer, base=True)
    assert invoke("angular", bare, *TINY, "--layers-path", "model.layers", "--out", tmp_path / "b").exit_code == 0


def test_angular_resumes_and_equals_an_uninterrupted_pass(model_dirs, corpus_file, tmp_path):
    from layerprobe.commands.angular.run import run_angular
    from layerprobe.config import AngularConfig, DataOptions, ModelOptions

    def config(out, **kw):
        return AngularConfig(model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                             data=DataOptions(str(corpus_file), tokens=600, seq_len=32, batch_size=2), out=str(out), save_every=0, **kw)

    whole = run_angular(config(tmp_path / "whole"))

    def kill_after_3_batches(stage, done, total):
        if done >= 3 * 64:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_angular(config(tmp_path / "cut"), kill_after_3_batches)
    assert (tmp_path / "cut" / "pass.safetensors").is_file() and not (tmp_path / "cut" / "summary.json").exists()
    assert_error(invoke("angular", model_dirs["llama"], "--dataset", corpus_file, "--tokens", 600, "--seq-len", 32,
                        "--batch-size", 4, "--device", "cpu", "--out", tmp_path / "cut", "--resume"), "different settings")
    resumed = run_angular(config(tmp_path / "cut", resume=True))
    for name in ("angular.csv", "layers.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / name), pd.read_csv(whole.folder / name),
                                      check_exact=True)
    assert not (tmp_path / "cut" / "pass.safetensors").exists() and not (tmp_path / "cut" / LOCK).exists()
    assert_error(invoke("angular", model_dirs["llama"], "--dataset", corpus_file, "--out", tmp_path / "cut",
                        "--resume"), "different settings")
    with pytest.raises(RunError, match="holds a finished angular run: nothing to resume"):
        run_angular(config(tmp_path / "cut", resume=True))
    assert not (tmp_path / "cut" / LOCK).exists()  # a refused --resume leaves the finished run as it was


@pytest.mark.parametrize("cut_at", [3 * 32, 600], ids=["mid-pass", "after-last-batch"])
def test_angular_on_builtin_resumes_wherever_it_was_cut(model_dirs, tmp_path, cut_at):
    """Issue 47: a pass saved after its last batch (cut while writing its outputs) resumed with nothing left to
    run and counted 0 tokens, so every --resume failed with "Dataset 'builtin' yielded no text"."""
    from layerprobe.commands.angular.run import run_angular
    from layerprobe.config import AngularConfig, DataOptions, ModelOptions

    def config(out, **kw):
        return AngularConfig(model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                             data=DataOptions("builtin", tokens=600, seq_len=16, batch_size=2), out=str(out),
                             save_every=0, lens_tokens=0, **kw)

    whole = run_angular(config(tmp_path / "whole"))

    def cut(stage, done, total):
        if stage == "tokens" and done >= cut_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_angular(config(tmp_path / "cut"), cut)
    assert (tmp_path / "cut" / "pass.safetensors").is_file() and not (tmp_path / "cut" / "summary.json").exists()
    resumed = run_angular(config(tmp_path / "cut", resume=True))
    for name in ("angular.csv", "layers.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / name), pd.read_csv(whole.folder / name),
                                      check_exact=True)
    summary = json.loads((resumed.folder / "summary.json").read_text())
    assert summary["tokens"] == 600 and summary["measured_positions"] == 600


@pytest.fixture
def full_disk(tmp_path):
    """A 32 KiB tmpfs: the first sizeable write ends in ENOSPC (skipped where the test cannot mount one)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()[:80]})")
    yield folder
    subprocess.run(["umount", str(folder)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing_that_looks_finished(full_disk, model_dirs, tmp_path):
    for args in (("angular", model_dirs["llama"], *TINY), ("prune", model_dirs["llama"], "--task", "kl", *TINY),
                 ("export", model_dirs["llama"], "--remove", "1")):
        out = full_disk / args[0]
        result = invoke(*args, "--out", out)
        assert_error(result, "No space left on device")
        assert not (out / "summary.json").exists() and not (out / "config.json").exists()
        assert not list(full_disk.rglob("*.tmp")) and not list(full_disk.glob(".*.partial"))
        for leftover in full_disk.iterdir():  # each attempt gets the whole disk
            subprocess.run(["rm", "-rf", str(leftover)], check=True)


@pytest.mark.parametrize("command", [["angular"], ["prune", "--task", "kl"]])
def test_ctrl_c_before_the_first_save_leaves_a_folder_that_resumes(command, model_dirs, tmp_path, monkeypatch):
    """Issue 39: Ctrl-C once the folder is claimed, before anything is saved (angular: while the model loads;
    prune: as the sweep starts, the baseline's first batch) keeps the claimed folder, says so, and both
    `--resume` and the same command without it run there (no timestamped sibling), as an uninterrupted run."""
    import layerprobe.commands.angular.run as angular_module
    import layerprobe.commands.prune.run as prune_module

    module, name = (angular_module, "open_probe") if command[0] == "angular" else (prune_module, "Ledger")
    real = getattr(module, name)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    args = [*command, model_dirs["llama"], *TINY]
    for again in (["--resume"], []):
        monkeypatch.setattr(module, name, ctrl_c)
        cut = tmp_path / f"cut{len(again)}"
        result = invoke(*args, "--out", cut)
        text = " ".join(result.output.split())
        assert result.exit_code == 130 and f"nothing was saved yet in {cut}" in text, text
        assert [p.name for p in cut.iterdir()] == [LOCK]
        monkeypatch.setattr(module, name, real)
        result = invoke(*args, "--out", cut, *again)
        assert result.exit_code == 0, result.output
        assert (cut / "summary.json").is_file() and not (cut / LOCK).exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(cut.name)] == [cut.name]  # no sibling
    whole = invoke(*args, "--out", tmp_path / "whole")
    assert whole.exit_code == 0, whole.output
    table = "angular.csv" if command[0] == "angular" else "prune.csv"
    for cut in ("cut0", "cut1"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / cut / table), pd.read_csv(tmp_path / "whole" / table))


def test_a_taken_out_is_said_on_the_first_line(model_dirs, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    result = invoke("angular", model_dirs["llama"], *TINY, "--out", tmp_path / "taken")
    assert result.exit_code == 0, result.output
    sibling = next(p for p in tmp_path.iterdir() if p.name.startswith("taken-"))
    first = " ".join(result.output.split("\n\n")[0].split())
    assert first.startswith(f"note: '{tmp_path / 'taken'}' already holds other files: this run writes to '{sibling}'")
    assert (sibling / "summary.json").is_file() and (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_an_error_before_any_work_still_leaves_no_folder(model_dirs, tmp_path, monkeypatch):
    import layerprobe.commands.angular.run as angular_module

    def broken(*args, **kwargs):
        raise RunError("broken on purpose")

    monkeypatch.setattr(angular_module, "open_probe", broken)
    assert_error(invoke("angular", model_dirs["llama"], *TINY, "--out", tmp_path / "err"), "broken on purpose")
    assert not (tmp_path / "err").exists()


def test_a_dangling_symlink_out_is_named_as_one(tmp_path):
    """--out a symbolic link to nothing: os.makedirs says only 'File exists'; the error says it is a broken link."""
    from layerprobe.errors import RunError
    from layerprobe.runs.folder import prepare_run_dir

    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(RunError, match="broken symbolic link .*gone.* does not exist"):
        prepare_run_dir(link)
    assert link.is_symlink() and not (tmp_path / "gone").exists()  # nothing made, nothing removed
