"""Bad input: one clear line naming the problem and the fix, exit code 2, no traceback."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from layerprobe.cli import app

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, list(args))
    return result


def assert_clean_error(result, *needles):
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in text.strip().splitlines() if line.strip()]
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
    assert_clean_error(run("angular", str(model_dirs["gpt2"]), "--dataset", str(corpus_file), flag, value),
                       flag, "positive")


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


def test_help_does_not_import_heavy_modules():
    import subprocess
    import sys

    code = ("import sys; from layerprobe.cli import app; from typer.testing import CliRunner; "
            "CliRunner().invoke(app, ['--help']); CliRunner().invoke(app, ['angular', '--help']); "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'lm_eval') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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
    import platform
    import subprocess
    import sys

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    faults = int(subprocess.run([sys.executable, "-c", FAULTS, "on"], capture_output=True, text=True,
                                check=True).stdout)
    touched = 20 * 12_200_000 * 4 // 4096  # pages written by the 20 measured cycles (~238K)
    # Kept pages are reused: a small fraction of the pages written fault in (~10K measured). Handed back to the
    # kernel, as glibc may do by default for blocks this size, every cycle faults them all in again.
    assert faults < touched // 5, (faults, touched)
