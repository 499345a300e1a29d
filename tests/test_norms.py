"""The normalization placement read from the blocks' structure (one forward), never from a name: the in-house
family's six placements and three transformers families (the real MiniLM: tests/test_placement_minilm.py)."""

from __future__ import annotations

import pytest
import torch
import transformers

from layerprobe.models.inhouse import build, make_config
from layerprobe.models.layers import find_blocks
from layerprobe.models.norms import block_placements, model_placement

# what each in-house placement is, by the papers' definitions: LNS is Pre-LN with a scaled norm, DeepNorm is Post-LN
# with a scaled residual, sandwich normalizes each sub-layer's output too (Peri-LN); Mix-LN puts Post-LN first
EXPECTED = {"pre": "pre", "post": "post", "lns": "pre", "deepnorm": "post", "sandwich": "peri", "mix": "mix"}


@pytest.mark.parametrize("placement", list(EXPECTED))
def test_inhouse_placements_are_read_from_the_blocks(placement):
    torch.manual_seed(0)
    model = build(make_config("tiny", placement, vocab_size=100), "cpu", torch.float32).eval()
    per_block = block_placements(model, find_blocks(model))
    assert model_placement(per_block) == EXPECTED[placement]
    if placement == "mix":  # floor(0.25 * 4) = 1 Post-LN block first, then Pre-LN
        assert per_block == ["post", "pre", "pre", "pre"]
    assert not any(block._forward_hooks or block._forward_pre_hooks for block in find_blocks(model).blocks)


@pytest.mark.parametrize("name,expected", [("gpt2", "pre"), ("bert", "post"), ("gemma3", "peri"), ("llama", "pre")])
def test_transformers_families(name, expected):
    torch.manual_seed(0)
    model = {
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2,
                                                                             n_head=4, bos_token_id=0, eos_token_id=0)),
        "bert": lambda: transformers.BertModel(transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                                       intermediate_size=64, num_attention_heads=4)),
        "gemma3": lambda: transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, head_dim=8)),
        "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)),
    }[name]().eval()
    assert model_placement(block_placements(model, find_blocks(model))) == expected
