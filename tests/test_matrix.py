"""The architecture matrix (issue 19): one tiny random checkpoint per family, built from its config with a fixed
seed and saved with a tokenizer whose ids fit, through angular, prune (a task-free metric fitting the head),
prune --block 2 and gradnorm --reinit; angular against HF's own hidden states, prune against an independently
shortened copy. Each family's outcome is written to $LAYERPROBE_MATRIX_OUT (JSON lines) when set: the README's
table is rendered from that file by `python bench/matrix_table.py FILE` (never typed by hand)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches

from .helpers import independent_pruned, reference_metric

runner = CliRunner()
DATA = ["--dataset", "builtin", "--tokens", "96", "--seq-len", "24", "--batch-size", "2", "--device", "cpu"]
DEC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
           max_position_embeddings=128)
ENC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=128)


def families(vocab: int, bos: int, eos: int) -> dict:
    """family -> (config, 'causal' or 'encoder'). Built lazily: a family this transformers cannot build is skipped."""
    t = transformers
    ids = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, pad_token_id=0)
    return {
        "llama": lambda: (t.LlamaConfig(**DEC, **ids), "causal"),
        "mistral": lambda: (t.MistralConfig(**DEC, **ids, sliding_window=16), "causal"),
        "qwen2": lambda: (t.Qwen2Config(**DEC, **ids), "causal"),
        "qwen3": lambda: (t.Qwen3Config(**DEC, **ids, head_dim=8), "causal"),
        "qwen2_moe": lambda: (t.Qwen2MoeConfig(**DEC, **ids, num_experts=4, num_experts_per_tok=2,
                                               moe_intermediate_size=16, shared_expert_intermediate_size=16), "causal"),
        "qwen3_moe": lambda: (t.Qwen3MoeConfig(**DEC, **ids, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                               moe_intermediate_size=16), "causal"),
        "mixtral": lambda: (t.MixtralConfig(**DEC, **ids, num_local_experts=4, num_experts_per_tok=2), "causal"),
        "deepseek_v3": lambda: (t.DeepseekV3Config(**{**DEC, "num_key_value_heads": 4}, **ids, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
                                                   qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=4,
                                                   num_experts_per_tok=2, first_k_dense_replace=1,
                                                   moe_intermediate_size=16, n_group=1, topk_group=1), "causal"),
        "gpt_oss": lambda: (t.GptOssConfig(**DEC, **ids, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                                           sliding_window=8), "causal"),
        "gemma2": lambda: (t.Gemma2Config(**DEC, **ids, head_dim=8, sliding_window=8), "causal"),
        "gemma3": lambda: (t.Gemma3TextConfig(**DEC, **ids, head_dim=8, sliding_window=8), "causal"),
        "phi3": lambda: (t.Phi3Config(**DEC, **ids), "causal"),
        "olmo2": lambda: (t.Olmo2Config(**DEC, **ids), "causal"),
        "gpt2": lambda: (t.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=4, n_head=4, n_positions=128,
                                      bos_token_id=bos, eos_token_id=eos), "causal"),
        "gpt_neox": lambda: (t.GPTNeoXConfig(**ENC, **ids), "causal"),
        "falcon": lambda: (t.FalconConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                          bos_token_id=bos, eos_token_id=eos), "causal"),
        "opt": lambda: (t.OPTConfig(vocab_size=vocab, hidden_size=32, ffn_dim=64, num_hidden_layers=4,
                                    num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=32,
                                    bos_token_id=bos, eos_token_id=eos, pad_token_id=0), "causal"),
        "bloom": lambda: (t.BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=4, n_head=4, bos_token_id=bos,
                                        eos_token_id=eos), "causal"),
        "bert": lambda: (t.BertConfig(vocab_size=vocab, **ENC), "encoder"),
        "roberta": lambda: (t.RobertaConfig(vocab_size=vocab, **{**ENC, "max_position_embeddings": 130}), "encoder"),
        "deberta_v2": lambda: (t.DebertaV2Config(vocab_size=vocab, **ENC), "encoder"),
        "modernbert": lambda: (t.ModernBertConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=4, num_attention_heads=4,
                                                  max_position_embeddings=128, pad_token_id=0, bos_token_id=bos,
                                                  eos_token_id=eos, cls_token_id=bos, sep_token_id=eos), "encoder"),
    }


NOT_SUPPORTED = {  # family -> why: not built in this version (named in the README's table, not tested)
    "t5": "encoder-decoder: two block stacks; --stack (encoder/decoder) is not built yet",
    "llava": "vision-language: --stack (language/vision) and text-only inputs are not built yet",
    "qwen2_vl": "vision-language: --stack (language/vision) and text-only inputs are not built yet",
    "jamba": "hybrid attention/Mamba layers: layer kinds (layer_type) are not built yet",
    "mamba2": "state-space model without attention: not tried in this version",
}

RESULTS: list[dict] = []


@pytest.fixture(scope="module")
def matrix_out():
    yield
    target = os.environ.get("LAYERPROBE_MATRIX_OUT")
    if target:
        rows = RESULTS + [{"family": name, "status": "not supported", "why": why} for name, why in NOT_SUPPORTED.items()]
        with open(target, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")


def build(name: str, tokenizer, root):
    make = families(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)[name]
    try:
        config, kind = make()
        torch.manual_seed(0)
        cls = transformers.AutoModelForCausalLM if kind == "causal" else transformers.AutoModel
        model = cls.from_config(config)
    except Exception as exc:  # a family this transformers cannot build: named, not failed
        RESULTS.append({"family": name, "status": "skipped", "why": f"transformers {transformers.__version__} "
                        f"cannot build it ({type(exc).__name__})"})
        pytest.skip(f"transformers {transformers.__version__} cannot build {name}: {exc}")
    folder = root / name
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, kind, cls


def naive_next_distance(folder, cls) -> np.ndarray:
    """d(l, l+1) for l = 0..L-2 from HF's own output_hidden_states (block inputs), per token in float64."""
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    sums, count = None, 0
    for batch in batches(open_corpus("builtin").texts(), tok, 24, 2, 96):
        with torch.no_grad():
            hidden = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           output_hidden_states=True).hidden_states
        states = [h.double().reshape(-1, h.shape[-1]) for h in hidden[:-1]]  # the last entry may be normed
        cos = torch.stack([torch.nn.functional.cosine_similarity(a, b, dim=-1) for a, b in zip(states, states[1:])])
        values = torch.arccos(cos.clamp(-1, 1)).sum(1) / math.pi
        sums = values if sums is None else sums + values
        count += states[0].shape[0]
    return (sums / count).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(families(10, 1, 2)))
def test_family(name, tokenizer, tmp_path, matrix_out):
    folder, kind, cls = build(name, tokenizer, tmp_path)
    try:
        check_family(folder, kind, cls, tmp_path)
    except AssertionError as exc:
        RESULTS.append({"family": name, "status": "fails", "kind": kind, "why": str(exc).strip().splitlines()[0][:200]})
        raise
    RESULTS.append({"family": name, "status": "works", "kind": kind, "metric": "kl" if kind == "causal" else "drift"})


def check_family(folder, kind, cls, tmp_path) -> None:
    metric = "kl" if kind == "causal" else "drift"
    # angular, against HF's hidden states
    result = runner.invoke(app, ["angular", str(folder), *DATA, "--out", str(tmp_path / "angular")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "angular" / "angular.csv")
    one = table[table["n"] == 1].sort_values("layer")["distance"].to_numpy()
    base = transformers.AutoModel if kind == "encoder" else transformers.AutoModelForCausalLM
    expected = naive_next_distance(folder, base)
    np.testing.assert_allclose(one[: len(expected)], expected, atol=1e-6)
    # prune: every layer, against an independently shortened copy
    result = runner.invoke(app, ["prune", str(folder), "--task", metric, *DATA, "--out", str(tmp_path / "prune")])
    assert result.exit_code == 0, result.output
    pruned = pd.read_csv(tmp_path / "prune" / "prune.csv")
    full = (transformers.AutoModel if kind == "encoder" else cls).from_pretrained(folder).eval()
    head = transformers.AutoModel if kind == "encoder" else cls
    for layer in (1, 3):
        want = reference_metric(metric, full, independent_pruned(folder, head, [layer]), folder, 96, 24, 2)
        got = float(pruned[pruned["layer"] == layer]["pruned"].iloc[0])
        assert got == pytest.approx(want, rel=1e-4, abs=2e-6), (layer, got, want)
    result = runner.invoke(app, ["prune", str(folder), "--task", metric, "--block", "2", *DATA,
                                 "--out", str(tmp_path / "block")])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(tmp_path / "block" / "prune.csv")["removed"].tolist() == ["0-1", "1-2", "2-3"]
    result = runner.invoke(app, ["gradnorm", str(folder), "--reinit", "--seeds", "1", "--batches", "1", *DATA[:2],
                                 "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
                                 "--out", str(tmp_path / "gradnorm")])
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(tmp_path / "gradnorm" / "gradnorm.csv")["layer"]) == {0, 1, 2, 3}

