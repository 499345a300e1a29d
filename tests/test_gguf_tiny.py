"""The GGUF reading paths on a tiny LLaMA GGUF (F16 matrices, F32 norms, a byte-level BPE; written here by export
--format gguf from a seeded model): the cache's conversion and the direct path (--no-cache) against transformers'
own GGUF loading, and a conversion killed halfway. Seconds, where the same on SmolLM2's Q4_1 takes minutes: these
are the default tier's twins of test_gguf.py's and test_gemma3.py's extended real-model checks of the conversion."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from layerprobe.models import gguf as gguf_module
from layerprobe.models.gguf import cache_root

from .helpers import invoke
from .test_angular import naive_reference

pytest.importorskip("gguf")
TEXT = "The sort() method of lists sorts in place; sorted() returns a new list, 12345 times."


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    """An 8-block LLaMA written to GGUF in F16 (norms in F32), as llama.cpp's converter writes one."""
    from .test_gguf_convert import byte_level_tokenizer, export_gguf, tiny_model

    source = tmp_path_factory.mktemp("hf-llama")
    tokenizer = byte_level_tokenizer()
    tiny_model("llama", len(tokenizer)).save_pretrained(source)
    tokenizer.save_pretrained(source)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    export_gguf(source, "none", path, gguf_type="f16")
    return path


def test_the_cache_holds_what_transformers_loads_from_the_gguf(cache, tiny_gguf):
    """The converted folder is transformers' own GGUF loading written out: every tensor equal to the bit, the same
    config class and layer count, the same tokens (layerprobe/models/gguf.py: from_pretrained(gguf_file=...), then
    its state dict written as save_pretrained writes one)."""
    import transformers

    folder = gguf_module.cached_folder(gguf_module.read_header(tiny_gguf))
    assert folder.parent == cache_root() and (folder / gguf_module.INFO_FILE).is_file()
    direct = transformers.AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name,
                                                               dtype=torch.float32)
    cached = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert type(cached) is type(direct) and cached.config.num_hidden_layers == direct.config.num_hidden_layers == 8
    want, got = direct.state_dict(), cached.state_dict()
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == torch.float32 and torch.equal(got[name], tensor), name
    from_gguf = transformers.AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert transformers.AutoTokenizer.from_pretrained(folder)(TEXT).input_ids == from_gguf(TEXT).input_ids


def test_direct_and_cached_angular_match_hf_hidden_states_of_the_gguf(cache, tiny_gguf, tmp_path):
    """--no-cache (transformers dequantizes the GGUF on load) and the cached folder: d(l, l+n) against transformers'
    own GGUF loading (output_hidden_states, per-token arccos in float64), and the two paths equal to the last digit."""
    args = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "2", "--dtype", "float32",
            "--device", "cpu", "--lens-tokens", "0"]
    tables = {}
    for name, extra in (("direct", ["--no-cache"]), ("cached", [])):
        result = invoke("angular", tiny_gguf, *args, *extra, "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
        tables[name] = pd.read_csv(tmp_path / name / "angular.csv")
    expected, count = naive_reference(str(tiny_gguf.parent), "norm", "builtin", 128, 32, 2, gguf_file=tiny_gguf.name)
    table = tables["direct"]
    assert int(table["tokens"].iloc[0]) == count and len(table) == 8 * 9 // 2
    for row in table.itertuples():
        assert row.distance == pytest.approx(expected[row.layer, row.layer + row.n], abs=1e-4)
    pd.testing.assert_frame_equal(tables["cached"], table, check_exact=True)


# The child converts for real and stops right after writing the weights (before the tokenizer and the record): the
# kill lands inside the conversion every time, whatever the machine's speed.
PAUSED_CONVERSION = """
import sys, time
from pathlib import Path
import safetensors.torch
from layerprobe.models import gguf
written = safetensors.torch.save_file
def save_file(*args, **kwargs):
    written(*args, **kwargs)
    Path(sys.argv[2]).touch()
    time.sleep(600)
safetensors.torch.save_file = save_file
gguf.cached_folder(gguf.read_header(Path(sys.argv[1])))
"""


@pytest.mark.slow  # a conversion in a child process, killed
def test_a_killed_conversion_is_redone(cache, tiny_gguf, tmp_path):
    copy = tmp_path / "killed.gguf"
    shutil.copyfile(tiny_gguf, copy)
    with open(copy, "ab") as handle:
        handle.write(b"\0\0")  # another file: another cache key
    inside = tmp_path / "weights-written"
    child = subprocess.Popen([sys.executable, "-c", PAUSED_CONVERSION, str(copy), str(inside)], env=os.environ.copy())
    deadline = time.time() + 120
    while time.time() < deadline and not inside.exists() and child.poll() is None:
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert inside.exists(), "the child never reached the middle of its conversion"
    key = gguf_module.file_sha256(copy)[:24]
    assert not (cache_root() / key).exists()  # only the hidden scratch folder may be left: never read
    assert [p for p in cache_root().iterdir() if p.name.startswith(f".{key}")]  # killed with half a folder written
    folder = gguf_module.cached_folder(gguf_module.read_header(copy))
    assert folder.name == key and (folder / gguf_module.INFO_FILE).is_file()
