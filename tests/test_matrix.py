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

from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches

from .helpers import assert_error, independent_pruned, invoke, reference_metric

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


NOT_SUPPORTED = {  # family -> why: named in the README's table, not tested
    "llava, qwen2_vl --stack vision": "vision towers run on images; layerprobe feeds text only (a one-line "
                                                "error names --stack language)",
}


def stacked_families(vocab: int, bos: int, eos: int) -> dict:
    """Families with several stacks, hybrids and state-space models: family -> (config, model class, runs).
    A run: (--stack or None, the stack's block path typed here by hand, how HF names that stack's hidden states,
    '+embeddings' where they start after the first block)."""
    t = transformers
    ids = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, pad_token_id=0)
    text = dict(**DEC, **ids)
    language = [(None, "model.language_model.layers", "hidden_states")]
    return {
        "t5": lambda: (t.T5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=4, num_decoder_layers=4,
                                  num_heads=4, pad_token_id=0, eos_token_id=eos, decoder_start_token_id=0),
                       t.T5ForConditionalGeneration,
                       [("encoder", "encoder.block", "encoder_hidden_states"),
                        ("decoder", "decoder.block", "decoder_hidden_states")]),
        "llava": lambda: (t.LlavaConfig(text_config=t.LlamaConfig(**text).to_dict(), image_token_index=vocab - 1,
                                        vision_config=dict(model_type="clip_vision_model", hidden_size=32,
                                                           intermediate_size=64, num_hidden_layers=2,
                                                           num_attention_heads=4, image_size=32, patch_size=8)),
                          t.LlavaForConditionalGeneration, language),
        "qwen2_vl": lambda: (t.Qwen2VLConfig(text_config=dict(**text, rope_scaling=dict(type="mrope",
                                                                                      mrope_section=[1, 1, 2])),
                                             vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4,
                                                                mlp_ratio=2, patch_size=4, spatial_merge_size=2),
                                             image_token_id=vocab - 1, video_token_id=vocab - 2,
                                             vision_start_token_id=vocab - 3),
                             t.Qwen2VLForConditionalGeneration, language),
        "jamba": lambda: (t.JambaConfig(**text, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
                                        expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1,
                                        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2),
                          t.JambaForCausalLM, [(None, "model.layers", "hidden_states")]),
        "qwen3_next": lambda: (t.Qwen3NextConfig(**text, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2,
                                                 linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4,
                                                 num_experts_per_tok=2, moe_intermediate_size=16,
                                                 shared_expert_intermediate_size=16, full_attention_interval=2),
                               t.Qwen3NextForCausalLM, [(None, "model.layers", "hidden_states")]),
        "falcon_h1": lambda: (t.FalconH1Config(**text, head_dim=8, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8,
                                               mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2,
                                               mamba_chunk_size=16),
                              t.FalconH1ForCausalLM, [(None, "model.layers", "hidden_states")]),
        "llama4": lambda: (t.Llama4TextConfig(**text, head_dim=8, num_local_experts=4, num_experts_per_tok=1,
                                              intermediate_size_mlp=64, interleave_moe_layer_step=2,
                                              no_rope_layers=[1, 1, 1, 0], attention_chunk_size=16),
                           t.Llama4ForCausalLM, [(None, "model.layers", "hidden_states")]),
        "mamba2": lambda: (t.Mamba2Config(vocab_size=vocab, hidden_size=32, num_hidden_layers=4, state_size=8,
                                          num_heads=8, head_dim=8, expand=2, n_groups=1, **{k: v for k, v in
                                          ids.items() if k != "vocab_size"}),
                           t.Mamba2ForCausalLM, [(None, "backbone.layers", "hidden_states+embeddings")]),
    }


KIND_OF = {"t5": "encoder-decoder", "llava": "vision-language", "qwen2_vl": "vision-language", "jamba": "hybrid",
           "qwen3_next": "hybrid", "falcon_h1": "hybrid", "llama4": "causal", "mamba2": "state-space"}
# The kind of each layer, by hand from the configs above (Jamba: attention every 2nd layer from layer 1)
EXPECTED_KINDS = {"jamba": ["mamba", "attention", "mamba", "attention"], "mamba2": ["mamba"] * 4,
                  "qwen3_next": ["linear_attention", "full_attention"] * 2, "falcon_h1": ["hybrid"] * 4,
                  "llama4": ["chunked_attention"] * 3 + ["full_attention"]}
# Mixture-of-experts layers (by hand from the configs) and top-k: router columns checked against HF's router logits
ROUTED = {"jamba": ([1, 3], 2), "qwen3_next": ([0, 1, 2, 3], 2), "llama4": ([1, 3], 1)}

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


def saved(name: str, make, tokenizer, root):
    """The model make() builds (seeded), saved with the tokenizer into root/name; a family this transformers cannot
    build is skipped with the reason, and named in the table."""
    try:
        torch.manual_seed(0)
        model = make()
    except Exception as exc:  # a family this transformers cannot build: named, not failed
        RESULTS.append({"family": name, "status": "skipped", "why": f"transformers {transformers.__version__} "
                        f"cannot build it ({type(exc).__name__})"})
        pytest.skip(f"transformers {transformers.__version__} cannot build {name}: {exc}")
    folder = root / name
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build(name: str, tokenizer, root):
    make = families(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)[name]
    kind = {}

    def model():  # the config too is built inside saved(): a family without one is skipped, not an error
        config, kind["kind"] = make()
        return head(kind["kind"]).from_config(config)

    folder = saved(name, model, tokenizer, root)
    return folder, kind["kind"], head(kind["kind"])


def head(kind: str):
    return transformers.AutoModelForCausalLM if kind == "causal" else transformers.AutoModel


@pytest.mark.slow
@pytest.mark.parametrize("name", list(families(10, 1, 2)))
def test_family(name, tokenizer, tmp_path, matrix_out):
    folder, kind, cls = build(name, tokenizer, tmp_path)
    try:
        check_family(folder, kind, cls, tmp_path, name)
    except AssertionError as exc:
        RESULTS.append({"family": name, "status": "fails", "kind": kind, "why": str(exc).strip().splitlines()[0][:200]})
        raise
    RESULTS.append({"family": name, "status": "works", "kind": kind, "metric": "kl" if kind == "causal" else "drift",
                    **({"how": "router_entropy and expert_load checked against HF's router logits"} if name in MOE
                       else {})})


MOE = {"qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss"}  # router columns of layers.csv checked


def check_family(folder, kind, cls, tmp_path, name="") -> None:
    metric = "kl" if kind == "causal" else "drift"
    # angular, against HF's hidden states
    result = invoke("angular", str(folder), *DATA, "--out", str(tmp_path / "angular"))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "angular" / "angular.csv")
    one = table[table["n"] == 1].sort_values("layer")["distance"].to_numpy()
    base = transformers.AutoModel if kind == "encoder" else transformers.AutoModelForCausalLM
    expected = hf_next_distance(folder, base, "hidden_states")
    np.testing.assert_allclose(one[: len(expected)], expected, atol=1e-6)
    layers = pd.read_csv(tmp_path / "angular" / "layers.csv")
    if name in MOE:  # against HF's own router logits (output_router_logits)
        moe = layers.dropna(subset=["router_entropy"])
        assert moe["layer"].tolist() == ([1, 2, 3] if name == "deepseek_v3" else [0, 1, 2, 3])  # first layer dense
        entropy, load = router_reference(folder, cls, 2)
        np.testing.assert_allclose(moe["router_entropy"], entropy, rtol=1e-6)
        np.testing.assert_allclose(moe["expert_load"], load, rtol=1e-6)
    else:
        assert layers["router_entropy"].isna().all()
    # prune: every layer, against an independently shortened copy
    result = invoke("prune", str(folder), "--task", metric, *DATA, "--out", str(tmp_path / "prune"))
    assert result.exit_code == 0, result.output
    pruned = pd.read_csv(tmp_path / "prune" / "prune.csv")
    full = (transformers.AutoModel if kind == "encoder" else cls).from_pretrained(folder).eval()
    head = transformers.AutoModel if kind == "encoder" else cls
    for layer in (1, 3):
        want = reference_metric(metric, full, independent_pruned(folder, head, [layer]), folder, 96, 24, 2)
        got = float(pruned[pruned["layer"] == layer]["pruned"].iloc[0])
        assert got == pytest.approx(want, rel=1e-4, abs=2e-6), (layer, got, want)
    result = invoke("prune", str(folder), "--task", metric, "--block", "2", *DATA,
                    "--out", str(tmp_path / "block"))
    assert result.exit_code == 0, result.output
    assert pd.read_csv(tmp_path / "block" / "prune.csv")["removed"].tolist() == ["0-1", "1-2", "2-3"]
    result = invoke("gradnorm", str(folder), "--reinit", "--seeds", "1", "--batches", "1", *DATA[:2],
                    "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
                    "--out", str(tmp_path / "gradnorm"))
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(tmp_path / "gradnorm" / "gradnorm.csv")["layer"]) == {0, 1, 2, 3}


def hf_forward(model, batch, seq2seq: bool, **extra):
    """The model's own forward on a packed batch; an encoder-decoder's decoder reads the same tokens."""
    ids, mask = batch.input_ids, batch.attention_mask
    more = dict(decoder_input_ids=ids, decoder_attention_mask=mask) if seq2seq else {}
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False, **more, **extra)


def packed(folder):
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return list(batches(open_corpus("builtin").texts(), tok, 24, 2, 96))


def hf_next_distance(folder, cls, key: str) -> np.ndarray:
    """d(l, l+1), l = 0..L-2, from the hidden states HF itself returns for one stack (`key`), float64 per token."""
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    sums, count = None, 0
    for batch in packed(folder):
        name, _, first = key.partition("+")
        hidden = getattr(hf_forward(model, batch, model.config.is_encoder_decoder, output_hidden_states=True), name)
        if first == "embeddings":  # Mamba-2 returns each block's output, not the embeddings first
            with torch.no_grad():
                hidden = (model.get_input_embeddings()(batch.input_ids), *hidden)
        states = [h.double().reshape(-1, h.shape[-1]) for h in hidden[:-1]]  # the last entry may be normed
        cos = torch.stack([torch.nn.functional.cosine_similarity(a, b, dim=-1) for a, b in zip(states, states[1:])])
        values = torch.arccos(cos.clamp(-1, 1)).sum(1) / math.pi
        sums = values if sums is None else sums + values
        count += states[0].shape[0]
    return (sums / count).numpy()


def cut(folder, cls, path: str, drop: list[int]):
    """A fresh copy with the blocks `drop` taken out of the ModuleList at `path` (typed by hand, not found)."""
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    blocks = getattr(parent, attr)
    setattr(parent, attr, torch.nn.ModuleList([b for i, b in enumerate(blocks) if i not in drop]))
    config = model.config.get_text_config()
    for name in ("layer_types", "no_rope_layers"):  # per-layer lists the forward indexes by position: each kept
        value = vars(config).get(name)  # block keeps its own entry (Llama 4's chunked / full attention)
        if isinstance(value, list) and len(value) == len(blocks):
            setattr(config, name, [v for i, v in enumerate(value) if i not in drop])
    return model


def kl_reference(folder, full, pruned) -> float:
    """Mean KL(full || pruned) of the output distributions over the packed batches, float64."""
    seq2seq = full.config.is_encoder_decoder
    total, count = 0.0, 0
    for batch in packed(folder):
        p = hf_forward(full, batch, seq2seq).logits.double().log_softmax(-1)
        q = hf_forward(pruned, batch, seq2seq).logits.double().log_softmax(-1)
        total += float((p.exp() * (p - q)).sum())
        count += p.shape[0] * p.shape[1]
    return total / count


def router_reference(folder, cls, k: int) -> tuple[list[float], list[float]]:
    """Per MoE layer, from HF's own router logits (output_router_logits): the mean of H(softmax) / ln E over the
    positions, and the entropy of the experts' share of the top-k picks / ln E."""
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    per_layer: list[list] = []
    for batch in packed(folder):
        logits = hf_forward(model, batch, False, output_router_logits=True).router_logits
        per_layer = per_layer or [[] for _ in logits]
        for parts, layer_logits in zip(per_layer, logits):
            parts.append(layer_logits.double())
    entropy, load = [], []
    for parts in per_layer:
        logits = torch.cat([p.reshape(-1, p.shape[-1]) for p in parts])
        experts = logits.shape[-1]
        prob = logits.softmax(-1)
        entropy.append(float((-(prob * prob.log()).sum(-1)).mean() / math.log(experts)))
        counts = torch.bincount(logits.topk(k, dim=-1).indices.flatten(), minlength=experts).double()
        share = counts[counts > 0] / counts.sum()
        load.append(float(-(share * share.log()).sum() / math.log(experts)))
    return entropy, load


@pytest.mark.slow
@pytest.mark.parametrize("name", list(stacked_families(10, 1, 2)))
def test_stacked_family(name, tokenizer, tmp_path, matrix_out):
    """Encoder-decoders (each stack), vision-language models (the language tower, text only), hybrids and
    state-space models: angular against HF's hidden states of the stack, prune against a copy cut by hand."""
    make = stacked_families(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)[name]
    parts = {}

    def model():
        config, parts["cls"], parts["runs"] = make()
        return parts["cls"](config)

    folder = saved(name, model, tokenizer, tmp_path)
    cls, runs = parts["cls"], parts["runs"]
    try:
        how = check_stacked(name, folder, cls, runs, tmp_path)
    except AssertionError as exc:
        RESULTS.append({"family": name, "status": "fails", "kind": KIND_OF[name],
                        "why": str(exc).strip().splitlines()[0][:200]})
        raise
    RESULTS.append({"family": name, "status": "works", "kind": KIND_OF[name], "metric": "kl", "how": how})


def check_stacked(name, folder, cls, runs, tmp_path) -> str:
    for stack, path, key in runs:
        flags = ["--stack", stack] if stack else []
        out = tmp_path / f"angular-{stack}"
        result = invoke("angular", str(folder), *flags, *DATA, "--out", str(out))
        assert result.exit_code == 0, result.output
        one = pd.read_csv(out / "angular.csv").query("n == 1").sort_values("layer")["distance"].to_numpy()
        expected = hf_next_distance(folder, cls, key)
        np.testing.assert_allclose(one[: len(expected)], expected, atol=1e-6)
        layers = pd.read_csv(out / "layers.csv")
        if name in EXPECTED_KINDS:
            assert layers["layer_type"].iloc[:4].tolist() == EXPECTED_KINDS[name]
        if name in ROUTED:
            moe = layers.dropna(subset=["router_entropy"])
            assert moe["layer"].tolist() == ROUTED[name][0]
            entropy, load = router_reference(folder, cls, ROUTED[name][1])
            np.testing.assert_allclose(moe["router_entropy"], entropy, rtol=1e-6)
            np.testing.assert_allclose(moe["expert_load"], load, rtol=1e-6)
        out = tmp_path / f"prune-{stack}"
        result = invoke("prune", str(folder), *flags, "--task", "kl", *DATA, "--out", str(out))
        assert result.exit_code == 0, result.output
        pruned = pd.read_csv(out / "prune.csv")
        full = cls.from_pretrained(folder, dtype=torch.float32).eval()
        for layer in (0, 2):  # T5's block 0 computes the position bias the others receive
            want = kl_reference(folder, full, cut(folder, cls, path, [layer]))
            got = float(pruned[pruned["layer"] == layer]["pruned"].iloc[0])
            assert got == pytest.approx(want, rel=1e-4, abs=2e-6), (stack, layer, got, want)
        result = invoke("prune", str(folder), *flags, "--task", "kl", "--block", "2", *DATA,
                        "--out", str(tmp_path / f"block-{stack}"))
        assert result.exit_code == 0, result.output
        result = invoke("gradnorm", str(folder), *flags, "--reinit", "--seeds", "1", "--batches", "1",
                        *DATA[:2], "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
                        "--out", str(tmp_path / f"gradnorm-{stack}"))
        assert result.exit_code == 0, result.output
        assert set(pd.read_csv(tmp_path / f"gradnorm-{stack}" / "gradnorm.csv")["layer"]) == {0, 1, 2, 3}
    if name == "t5":  # a language-model metric on an encoder-decoder: the user picks the stack
        result = invoke("prune", str(folder), "--task", "kl", *DATA, "--out", str(tmp_path / "which"))
        assert_error(result, "pass --stack decoder or --stack encoder")
        return ("--stack encoder (default for angular and drift) or --stack decoder, the decoder reading the input "
                "tokens; block 0 computes the position bias the others receive, so removals of block 0 are scored "
                "by a full forward (no shared prefix)")
    if name in ("llava", "qwen2_vl"):
        result = invoke("angular", str(folder), "--stack", "vision", *DATA, "--out", str(tmp_path / "v"))
        assert_error(result, "runs on images")
        return "the language tower (default --stack language) on text-only input"
    if name == "jamba":  # its config derives each layer's kind from periods: only whole periods can be exported
        result = invoke("export", str(folder), "--remove", "2", "--device", "cpu",
                        "--out", str(tmp_path / "export-2"))
        assert_error(result, "derives each layer's kind from attn_layer_offset")
        result = invoke("export", str(folder), "--remove", "2-3", "--device", "cpu",
                        "--out", str(tmp_path / "export-23"))
        assert result.exit_code == 0, result.output
        assert transformers.AutoConfig.from_pretrained(tmp_path / "export-23").layers_block_type == ["mamba", "attention"]
    how = {"jamba": "attention / mamba layers", "qwen3_next": "linear (Gated DeltaNet) / full attention layers",
           "falcon_h1": "attention and Mamba in every layer", "llama4": "chunked / full attention, every 2nd layer MoE",
           "mamba2": "Mamba-2 blocks, no attention"}[name]
    how += "; layer_type in layers.csv, prune.csv and the plots' ticks, checked against the config"
    if name in ROUTED:
        how += "; router columns checked against HF's router logits"
    if name == "jamba":
        how += "; export only of whole periods (the config derives each layer's kind from them)"
    return how
