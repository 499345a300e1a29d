"""Bad input: one clear line naming the problem and the fix, exit code 2, no traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from .helpers import invoke


def run(*args):
    return invoke(*args)


PHASES = ("loading ", "building lm-eval's task ", "converting ", "assembling ")  # progress.announce's lines


def assert_clean_error(result, *needles):
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text
    assert result.exception is None or isinstance(result.exception, SystemExit)
    # the error is the first line but for the phases that lasted long enough to be announced (a slow load)
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith(PHASES)]
    assert lines and lines[0].startswith("error:"), text
    joined = " ".join(text.split())
    for needle in needles:
        assert needle in joined, text


def test_missing_model_folder(tmp_path, corpus_file):
    assert_clean_error(run("angular", str(tmp_path / "nope"), "--dataset", str(corpus_file)), "does not exist")


@pytest.mark.parametrize("command", [["angular"], ["prune", "--task", "drift"], ["gradnorm"]])
def test_missing_model_is_named_before_the_offline_corpus(tmp_path, command):
    # default dataset c4 cannot stream offline either; the model is the first thing to fix
    result = run(command[0], str(tmp_path / "nope"), *command[1:])
    assert_clean_error(result, "Model folder", "does not exist")


def test_config_without_weights(tmp_path, model_dirs, corpus_file):
    folder = tmp_path / "noweights"
    folder.mkdir()
    shutil.copy(model_dirs["llama"] / "config.json", folder)
    assert_clean_error(run("angular", str(folder), "--dataset", str(corpus_file)), "no weights")


def test_folder_without_config(tmp_path, corpus_file):
    (tmp_path / "empty").mkdir()
    assert_clean_error(run("angular", str(tmp_path / "empty"), "--dataset", str(corpus_file)), "No config.json")


def test_corrupt_weights(tmp_path, model_dirs, corpus_file):
    folder = tmp_path / "corrupt"
    shutil.copytree(model_dirs["llama"], folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    assert_clean_error(run("angular", str(folder), "--dataset", str(corpus_file)), "Could not load the weights")


def test_unknown_architecture(tmp_path, model_dirs, corpus_file):
    folder = tmp_path / "alien"
    shutil.copytree(model_dirs["llama"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "alienformer"
    (folder / "config.json").write_text(json.dumps(config))
    assert_clean_error(run("angular", str(folder), "--dataset", str(corpus_file)), "Unknown architecture")


def test_hub_id_offline_is_fast_and_clear(corpus_file):
    assert_clean_error(run("angular", "nobody/no-such-model", "--dataset", str(corpus_file)), "offline")


def test_default_c4_offline_says_how_to_fix(model_dirs):
    assert_clean_error(run("angular", str(model_dirs["gpt2"])), "offline", "--dataset builtin")


@pytest.mark.parametrize("flag", ["--tokens", "--seq-len", "--batch-size"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_impossible_sizes(flag, value, model_dirs, corpus_file):
    bound = "positive" if flag == "--batch-size" else "at least 2"  # a next-token target needs two positions
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(corpus_file), flag, value),
                       flag, bound)


def test_missing_dataset_file(model_dirs, tmp_path):
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(tmp_path / "x.jsonl")), "does not exist")


def test_empty_dataset(model_dirs, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n  \n")
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(path), "--out", str(tmp_path / "o")),
                       "no text")


def test_malformed_jsonl(model_dirs, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"text": broken\n')
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(path)), "line 2", "not valid JSON")


def test_jsonl_without_text_field(model_dirs, tmp_path):
    path = tmp_path / "fields.jsonl"
    path.write_text('{"body": "hello"}\n')
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(path)), "--text-field")


def test_bad_layers_path(model_dirs, corpus_file):
    assert_clean_error(run("angular", str(model_dirs["llama"]), "--dataset", str(corpus_file), "--layers-path", "model.nope"),
                       "model.nope")


def test_bad_positions_and_dtype(model_dirs, corpus_file):
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(corpus_file), "--positions", "first"),
                       "--positions")
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(corpus_file), "--dtype", "int3"), "dtype")


def test_help_does_not_import_heavy_modules(tmp_path):
    """--help loads none of the model stack, and neither do the readers: compare and report of a committed prune run
    (each such CLI call paid ~2 s for torch, which they never use)."""
    import subprocess
    import sys

    committed = Path(__file__).resolve().parents[1] / "reports" / "demo" / "prune-drift"  # its reader: prune's
    run_folder = shutil.copytree(committed, tmp_path / "prune-drift")
    code = ("import sys; from layerprobe.cli import app; from typer.testing import CliRunner; "
            "CliRunner().invoke(app, ['--help']); CliRunner().invoke(app, ['angular', '--help']); "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'lm_eval') if m in sys.modules)); "
            f"said = [CliRunner().invoke(app, args).exit_code for args in "
            f"(['compare', {str(run_folder)!r}, {str(run_folder)!r}], ['report', {str(run_folder)!r}])]; "
            "print(said, sorted(m for m in ('torch', 'transformers', 'datasets', 'lm_eval') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines() == ["[]", "[0, 0] []"]


FAULTS = """
import resource, sys, torch
if sys.argv[1] == "on":
    from layerprobe.cli.memory import keep_freed_memory
    assert keep_freed_memory()
def cycle():  # a pass's worth of activations of mixed sizes, allocated and freed
    xs = [torch.empty(n).fill_(1.0) for n in (4_000_000, 1_500_000, 4_000_000, 700_000, 2_000_000)]
    del xs
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_cli_memory_setting_reuses_freed_pages():
    import os
    import platform
    import subprocess
    import sys

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    # Both runs start with glibc told to hand every freed block back to the kernel (mmap above 128 KiB, trim at
    # once), whatever this machine's default is: the control shows the measurement sees pages handed back.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}

    def faults(mode: str) -> int:
        return int(subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True,
                                  env=env).stdout)

    touched = 20 * 12_200_000 * 4 // 4096  # pages written by the 20 measured cycles (~238K)
    control, kept = faults("off"), faults("on")
    assert control > 0.9 * touched, (control, touched)  # handed back: every cycle faults its pages in again
    assert kept < touched // 5, (kept, touched)  # the CLI's setting overrides that and reuses the pages


@pytest.mark.parametrize("command", [["angular", "--tokens", "64"], ["prune", "--task", "kl", "--tokens", "64"],
                                     ["gradnorm", "--seeds", "1", "--batches", "1"]])
def test_tokenizer_ids_beyond_the_embeddings(command, tokenizer, tmp_path):
    """A checkpoint saved with a tokenizer of another vocabulary: named before the first forward (no IndexError)."""
    import transformers

    from .conftest import tiny_config

    torch.manual_seed(0)
    folder = tmp_path / "small-vocab"
    transformers.LlamaForCausalLM(tiny_config("llama", 1000, 1, 2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)  # MiniLM's: 30,522 ids, [CLS] = 101, [SEP] = 102, [UNK] = 100
    result = run(command[0], str(folder), *command[1:], "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2",
                 "--out", str(tmp_path / "out"))
    assert_clean_error(result, "30522 token ids", "1000 input embeddings")
    assert not (tmp_path / "out").exists()


def test_square_brackets_print_as_written(tmp_path):
    """Rich markup would eat '[tool.layerprobe]' in help and '[eval]' in messages."""
    assert "[tool.layerprobe]" in " ".join(run("angular", "--help").output.split())
    assert "[tool.layerprobe]" in " ".join(run("prune", "--help").output.split())
    folder = tmp_path / "odd [name]"
    assert_clean_error(run("angular", str(folder / "model[1]"), "--dataset", "builtin"), "odd [name]/model[1]")


def test_progress_lines_in_a_log():
    """Not a terminal (a CI log, `| tee`): a line at a stage's first progress and at its end, and at least every
    30 s between."""
    from layerprobe.cli.common import LogProgress

    now = [0.0]
    lines = []
    progress = LogProgress(every=30, clock=lambda: now[0], write=lines.append)
    progress("tokens", 0, 1000)
    for step, t in ((100, 10.0), (200, 31.0), (300, 35.0), (600, 70.0), (1000, 80.0)):
        now[0] = t
        progress("tokens", step, 1000)
    assert lines == ["tokens: 100/1,000 10% after 0:00:10, 10.0/s, eta 0:01:30",  # 900 / (100 / 10) = 90 s
                     "tokens: 600/1,000 60% after 0:01:10, 8.6/s, eta 0:00:46",  # 400 / (600 / 70) = 46.7 s
                     "tokens: 1,000/1,000 done after 0:01:20, 12.5/s"]


def test_a_stage_that_lasts_says_it_started_and_a_quick_one_or_an_error_does_not():
    """A CI log shows a slow phase from its start (its first item may take long: a SmolLM2 held-out batch, 14 s),
    not a line for a phase that moves at once, nor one before an error (settle)."""
    import time as clock

    from layerprobe.cli.common import LogProgress, settle

    lines = []
    progress = LogProgress(write=lines.append, start_after=0.05)
    progress("held-out scores (batches)", 0, 4)
    clock.sleep(0.3)
    assert lines == ["held-out scores (batches): 0/4 started"]
    progress("capture (batches)", 0, 4)
    progress("overall (steps)", 0, 9)  # another stage's call (the demo's overall bar) leaves it pending
    progress("capture (batches)", 1, 4)  # moved before the delay: no start line, its first progress line instead
    progress("outputs (files written)", 0, 3)
    settle()  # an error: nothing more
    clock.sleep(0.3)
    assert lines[1:] == [lines[1]] and lines[1].startswith("capture (batches): 1/4 25%")


def test_slow_stage_says_seconds_each_not_zero_per_second():
    from layerprobe.cli.common import LogProgress

    now, lines = [0.0], []
    progress = LogProgress(every=30, clock=lambda: now[0], write=lines.append)
    progress("variants", 0, 3)
    for step, t in ((1, 40.0), (3, 120.0)):
        now[0] = t
        progress("variants", step, 3)
    assert lines == ["variants: 1/3 33% after 0:00:40, 40.0 s each, eta 0:01:20",
                     "variants: 3/3 done after 0:02:00, 40.0 s each"]


def test_cli_prints_progress_lines_when_not_a_terminal(model_dirs, tmp_path):
    """The CLI in-process (the same code as `python -m layerprobe`, without a second interpreter's start-up): the
    runner's stderr is a captured stream, not a terminal, as a pipe or a CI log is."""
    result = invoke("angular", model_dirs["llama"], "--dataset", "builtin", "--tokens", "256", "--seq-len", "32",
                    "--batch-size", "2", "--device", "cpu", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    # phase lines (a load that lasts) may come first; then the stage's counts, plain
    counts = [line for line in lines if not line.startswith("loading ")]
    assert counts[0].startswith(("tokens: ", "logit lens (positions): ")), result.stderr
    assert "tokens: 256/256 done after" in result.stderr, result.stderr
    assert "logit lens (positions): 16/16 done after" in result.stderr  # the lens's own phase, named by its unit
    assert "\x1b[" not in result.stderr  # plain lines


def test_a_one_batch_sweep_moves_its_bar_per_variant(model_dirs, tmp_path):
    """A short sweep is one batch: its progress moves as each variant is scored, never 0/64 until done."""
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import DataOptions, ModelOptions, PruneConfig

    calls = []
    run_prune(PruneConfig(task="kl", model=ModelOptions(str(model_dirs["llama"]), device="cpu"),
                          data=DataOptions("builtin", tokens=64, seq_len=32, batch_size=2), out=str(tmp_path / "r")),
              lambda *call: calls.append(call))
    done = [d for stage, d, total in calls if stage == "tokens"]
    assert done[0] == 0 and done[-1] == 64 and done == sorted(done)
    assert len({d for d in done if 0 < d < 64}) >= 3  # 4 layers: steps inside the one batch


def test_a_phase_line_shows_only_when_the_phase_lasts(monkeypatch):
    """progress.announce: a phase that ends within PHASE_AFTER seconds says nothing (an error stays one line); one
    that lasts prints its line."""
    import logging
    import time

    from layerprobe.cli import common
    from layerprobe.progress import announce

    printed = []
    monkeypatch.setattr(common.console, "print", lambda text, **kw: printed.append(text))
    monkeypatch.setattr(common, "PHASE_AFTER", 0.2)
    common.show_phases()
    announce("quick phase")
    common.settle()  # it ended (progress began, or an error) before 0.2 s
    announce("slow phase")
    time.sleep(0.6)
    common.settle()
    assert printed == ["[dim]slow phase[/dim]"]
    logging.getLogger("layerprobe.phase").handlers.clear()
