"""export --format gguf from a transformers source (issue 50): tiny LLaMA, Qwen2 and Gemma 3 models built from
configs with fixed seeds and a byte-level BPE tokenizer trained here, exported to GGUF and read back by gguf's reader
(metadata, tokenizer, tensor types) and by transformers' GGUF loader, whose logits are compared with the model with
the same blocks deleted by hand (helpers.independent_pruned). llama.cpp itself reads these files in
test_gguf_llamacpp.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from .helpers import assert_error, independent_pruned, invoke

gguf = pytest.importorskip("gguf")
TEXT = "The sort() method of lists sorts in place; sorted() returns a new list, 12345 times."
IDS = list(range(3, 43))  # 40 positions: past the tiny Gemma 3's sliding window of 6


def byte_level_tokenizer():
    """A GPT-2 style byte-level BPE of 400 tokens trained on Python's docs (deterministic), with bos/eos/pad."""
    import transformers
    from pydoc_data.topics import topics
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator([topics[k] for k in sorted(topics)[:20]], trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>",
                                                pad_token="<|endoftext|>")


def tiny_model(arch: str, vocab: int, layers: int = 8):
    """A seeded tiny causal LM, norms drawn away from their init (a +1 or a permutation left out would show)."""
    import transformers

    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1,
                  eos_token_id=2, pad_token_id=0)
    config = {"llama": lambda: transformers.LlamaConfig(**common),
              "qwen2": lambda: transformers.Qwen2Config(**common),
              # head_dim 16 scaled by 1/sqrt(16), as llama.cpp scales Gemma 3; every 6th layer full attention
              "gemma3": lambda: transformers.Gemma3TextConfig(**common, head_dim=16, query_pre_attn_scalar=16,
                                                              sliding_window=6)}[arch]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:  # Gemma's weights are offsets from 1, the others scales
                parameter.normal_(0.0 if arch == "gemma3" else 1.0, 0.3)
            elif "bias" in name:
                parameter.normal_(0.0, 0.1)
    return model.eval()


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    tokenizer = byte_level_tokenizer()
    folders = {}
    for arch in ("llama", "qwen2", "gemma3"):
        folder = tmp_path_factory.mktemp(f"hf-{arch}")
        tiny_model(arch, len(tokenizer)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[arch] = folder
    return folders


def export_gguf(source: Path, remove: str, out: Path, gguf_type: str = "f32") -> dict:
    """The library call (the timing settings have no flags), timing kept to a minimum."""
    from layerprobe.commands.export import run_export
    from layerprobe.config import ExportConfig, ModelOptions

    config = ExportConfig(model=ModelOptions(model=str(source), device="cpu", dtype="float32"), remove=remove,
                          out=str(out), formats=("gguf",), gguf_type=gguf_type, timing_seq_len=16, timing_repeats=1,
                          timing_new_tokens=0)
    return run_export(config)


def reload(path: Path, kinds: list[str] | None):
    """transformers' GGUF loader on the file, with what llama.cpp takes from elsewhere: the layer kinds from the
    pattern array (transformers does not read it) and Gemma 3's attention scale 1/sqrt(head_dim)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    if kinds is not None:
        config.layer_types = kinds
    if config.model_type == "gemma3_text":
        config.query_pre_attn_scalar = config.head_dim
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, config=config,
                                                             dtype=torch.float32).eval()


@pytest.mark.parametrize("arch, remove, drop", [("llama", "2-3", [2, 3]), ("qwen2", "0,5", [0, 5]),
                                                # the full-attention layer 5 moves to index 3
                                                ("gemma3", "1-2", [1, 2])])
def test_a_transformers_model_converts_like_llama_cpp_and_reloads_as_the_model_without_those_blocks(
        tiny_dirs, tmp_path, arch, remove, drop):
    import transformers

    target = tmp_path / f"{arch}.gguf"
    done = export_gguf(tiny_dirs[arch], remove, target)["gguf_export"]
    reference = independent_pruned(tiny_dirs[arch], transformers.AutoModelForCausalLM, drop)
    reader = gguf.GGUFReader(str(target))
    name = {"llama": "llama", "qwen2": "qwen2", "gemma3": "gemma3"}[arch]
    meta = {k: f.contents() for k, f in reader.fields.items()}
    config = reference.config
    assert meta["general.architecture"] == name and meta[f"{name}.block_count"] == 6
    assert meta[f"{name}.embedding_length"] == 32 and meta[f"{name}.feed_forward_length"] == 64
    assert meta[f"{name}.attention.head_count"] == 4 and meta[f"{name}.attention.head_count_kv"] == 2
    assert meta[f"{name}.context_length"] == 128 and meta[f"{name}.vocab_size"] == config.vocab_size
    assert meta[f"{name}.attention.layer_norm_rms_epsilon"] == pytest.approx(config.rms_norm_eps)
    assert meta["general.file_type"] == 0  # llama.cpp's ALL_F32
    assert json.loads(meta["layerprobe.removal"])["removed"] == drop
    kinds = None
    if arch == "gemma3":
        assert meta["gemma3.attention.key_length"] == meta["gemma3.attention.value_length"] == 16
        assert meta["gemma3.attention.sliding_window"] == 6
        pattern = meta["gemma3.attention.sliding_window_pattern"]
        assert pattern == [k == "sliding_attention" for k in config.layer_types] == [True] * 3 + [False] + [True] * 2
        kinds = ["sliding_attention" if p else "full_attention" for p in pattern]
    if arch == "llama":
        assert meta["llama.rope.dimension_count"] == 8
    # the tokenizer as the HF tokenizer has it
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dirs[arch])
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.tokens"] == [t for t, _ in vocab]
    # GPT-2's ByteLevel regex alone; transformers gives a Qwen2 folder Qwen2Tokenizer, with Qwen2's own split regex
    assert meta["tokenizer.ggml.pre"] == ("qwen2" if arch == "qwen2" else "gpt-2")
    assert json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]["type"] == (
        "Sequence" if arch == "qwen2" else "ByteLevel")
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    assert meta["tokenizer.ggml.merges"] == [" ".join(m) if isinstance(m, list) else m for m in merges]
    assert meta["tokenizer.ggml.token_type"][:3] == [3, 3, 3] and set(meta["tokenizer.ggml.token_type"][3:]) == {1}
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (1, 2)
    # every matrix F32, no output.weight where the embedding is tied, blocks blk.0..5
    names = {t.name for t in reader.tensors}
    assert ("output.weight" in names) == (not config.tie_word_embeddings)
    assert {int(n.split(".")[1]) for n in names if n.startswith("blk.")} == set(range(6))
    assert {t.tensor_type.name for t in reader.tensors} == {"F32"}
    # transformers' GGUF loader against the hand-pruned model
    got = reload(target, kinds)
    ids = torch.tensor([IDS])
    with torch.no_grad():
        torch.testing.assert_close(got(ids).logits, reference(ids).logits, atol=1e-5, rtol=0)
    assert done["verified_max_difference"] <= done["tolerance"] == 1e-4
    assert done["tensors_changed_type"] == [] and done["origin_gguf"] is None
    # and its tokenizer, rebuilt from the file, tokenizes as the HF one
    from_file = transformers.AutoTokenizer.from_pretrained(target.parent, gguf_file=target.name)
    assert from_file(TEXT).input_ids[-20:] == tokenizer(TEXT).input_ids[-20:]


def test_f16_and_bf16_write_matrices_in_that_type_norms_in_f32_within_the_stated_tolerance(tiny_dirs, tmp_path):
    import transformers

    from layerprobe.commands.export_gguf import TOLERANCES

    reference = independent_pruned(tiny_dirs["llama"], transformers.AutoModelForCausalLM, [1])
    ids = torch.tensor([IDS])
    with torch.no_grad():
        want = reference(ids).logits
    for kind, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        target = tmp_path / f"{kind}.gguf"
        done = export_gguf(tiny_dirs["llama"], "1", target, kind)["gguf_export"]
        reader = gguf.GGUFReader(str(target))
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        assert {types[n] for n in types if n.endswith("norm.weight")} == {"F32"}
        assert {types[n] for n in types if not n.endswith("norm.weight")} == {kind.upper()}
        assert reader.fields["general.file_type"].contents() == {"f16": 1, "bf16": 32}[kind]
        # the file's matrices are the reference's rounded to the type (q rows in llama.cpp's rotary order aside)
        down = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
        mine = reference.model.layers[0].mlp.down_proj.weight.detach().to(dtype).float().numpy()
        stored = np.asarray(down.data).view(np.float16 if kind == "f16" else np.uint16)
        if kind == "bf16":
            stored = (stored.astype(np.uint32) << 16).view(np.float32)
        assert np.array_equal(stored.astype(np.float32).reshape(mine.shape), mine)
        with torch.no_grad():
            difference = float((reload(target, None)(ids).logits - want).abs().max())
        assert 0 < difference <= TOLERANCES[kind] and done["tolerance"] == TOLERANCES[kind]
        assert done["verified_max_difference"] <= TOLERANCES[kind]


def test_bad_gguf_requests_from_a_transformers_source_are_one_line_and_write_nothing(
        tiny_dirs, minilm_dir, tmp_path):
    out = tmp_path / "out"
    result = invoke("export", str(minilm_dir), "--remove", "1", "--format", "gguf", "--out", str(out))
    assert_error(result, "knows no GGUF mapping for 'bert'")
    assert "llama, qwen2, gemma3_text" in result.output.replace("\n", "")
    assert_error(invoke("export", str(tiny_dirs["llama"]), "--remove", "1", "--gguf-type", "f32", "--out", str(out)),
                 "--gguf-type f32 does nothing with --format hf")
    assert_error(invoke("export", str(tiny_dirs["llama"]), "--remove", "1", "--format", "gguf", "--gguf-type", "q4",
                        "--out", str(out)), "Unknown --gguf-type 'q4'")
    from .test_gguf_export import tiny_gguf

    source = tiny_gguf(tmp_path / "src.gguf", "llama", 4, {})
    assert_error(invoke("export", str(source), "--remove", "1", "--format", "gguf", "--gguf-type", "f16", "--out",
                        str(out)), "does nothing with a GGUF source")
    assert not out.exists()


def test_a_gguf_source_export_copies_the_kept_blocks_byte_for_byte_and_reloads_like_the_hf_export(tiny_dirs, tmp_path):
    """The default tier's twin of test_gguf_export.py's SmolLM2 export (extended): a tiny LLaMA GGUF of mixed types
    (F16 matrices, F32 norms) as the source; the written file against the source's own metadata and bytes through
    gguf's reader, and transformers' GGUF loader on it against plain transformers on the HF export beside it."""
    import transformers

    from .test_gguf_export import MARK, export_both, fields

    source = tmp_path / "source.gguf"
    export_gguf(tiny_dirs["llama"], "7", source, gguf_type="f16")  # 7 blocks, written as llama.cpp's converter does
    out = tmp_path / "short"
    done = export_both(str(source), "2-3", out)
    keep = [0, 1, 4, 5, 6]
    src, got = gguf.GGUFReader(str(source)), gguf.GGUFReader(str(out / "model.gguf"))
    want_fields, got_fields = fields(src), fields(got)
    assert got_fields.pop("llama.block_count") == ([gguf.GGUFValueType.UINT32], 5)
    assert want_fields.pop("llama.block_count") == ([gguf.GGUFValueType.UINT32], 7)
    assert json.loads(got_fields.pop(MARK)[1])["removed"] == [2, 3]
    assert json.loads(want_fields.pop(MARK)[1])["removed"] == [7]  # the source is itself an export: its own mark
    assert got_fields == want_fields  # tokenizer, merges, rope, norms' epsilon, file type: as in the source
    assert got.fields["GGUF.tensor_count"].contents() == len(got.tensors) == len(src.tensors) - 2 * 9
    assert got.alignment == src.alignment
    by_name = {t.name: t for t in src.tensors}
    assert {t.tensor_type.name for t in src.tensors} == {"F16", "F32"}
    for tensor in got.tensors:
        parts = tensor.name.split(".")
        origin = f"blk.{keep[int(parts[1])]}.{'.'.join(parts[2:])}" if parts[0] == "blk" else tensor.name
        assert tensor.tensor_type == by_name[origin].tensor_type and list(tensor.shape) == list(by_name[origin].shape)
        assert np.array_equal(np.asarray(tensor.data).view(np.uint8), np.asarray(by_name[origin].data).view(np.uint8))
        assert tensor.data_offset % got.alignment == 0
    assert {int(t.name.split(".")[1]) for t in got.tensors if t.name.startswith("blk.")} == set(range(5))
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32)
    from_hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert from_gguf.config.num_hidden_layers == from_hf.config.num_hidden_layers == 5
    ids = torch.tensor([IDS])
    with torch.no_grad():
        torch.testing.assert_close(from_gguf(ids).logits, from_hf(ids).logits, atol=1e-5, rtol=0)
    written = done["gguf_export"]
    assert written["tensors_changed_type"] == [] and written["block_count"] == 5
    assert written["tensors_copied_byte_for_byte"] == len(got.tensors)


def test_a_healed_checkpoint_converts_as_it_is_with_remove_none(tiny_dirs, tmp_path):
    """heal's merged/ (lstsq's transform folded into a down-projection) to GGUF with nothing more removed: transformers'
    GGUF loader on the file equals plain transformers on merged/, and the record names the removal heal made."""
    import transformers

    heal = tmp_path / "heal"
    result = invoke("heal", tiny_dirs["llama"], "--remove", "2-3", "--method", "lstsq", "--dataset", "builtin",
                    "--tokens", "1024", "--seq-len", "32", "--batch-size", "4", "--no-gain", "--out", heal)
    assert result.exit_code == 0, result.output
    target = tmp_path / "healed.gguf"
    result = invoke("export", heal / "merged", "--remove", "none", "--format", "gguf", "--gguf-type", "f32",
                    "--out", target)
    assert result.exit_code == 0, result.output
    assert "removed nothing (--remove none): 6 layers -> 6 layers" in " ".join(result.output.split())
    merged = transformers.AutoModelForCausalLM.from_pretrained(heal / "merged", dtype=torch.float32).eval()
    ids = torch.tensor([IDS])
    with torch.no_grad():
        torch.testing.assert_close(reload(target, None)(ids).logits, merged(ids).logits, atol=1e-5, rtol=0)
    record = json.loads({k: f.contents() for k, f in gguf.GGUFReader(str(target)).fields.items()}["layerprobe.removal"])
    assert record["removed"] == [] and record["kept"] == list(range(6))
    assert_error(invoke("export", heal / "merged", "--remove", "none", "--part", "attn", "--out", tmp_path / "x"),
                 "--remove none zeroes no sub-layer")
