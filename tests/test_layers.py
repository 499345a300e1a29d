"""Block discovery on real architectures, a generic model, and a model without blocks."""

from __future__ import annotations

import pytest
import torch
import transformers

from layerprobe.errors import ArchitectureError
from layerprobe.models.layers import find_blocks
from layerprobe.models.load import load_model

EXPECTED = {
    ("llama", "base"): "layers", ("llama", "causal-lm"): "model.layers",
    ("qwen2", "causal-lm"): "model.layers", ("gpt2", "base"): "h", ("gpt2", "causal-lm"): "transformer.h",
    ("bert", "base"): "encoder.layer", ("bert", "masked-lm"): "bert.encoder.layer",
}


@pytest.mark.parametrize("arch,head", list(EXPECTED))
def test_known_architectures(arch, head, model_dirs):
    loaded = load_model(str(model_dirs[arch]), head=head, device="cpu")
    stack = find_blocks(loaded.model)
    assert stack.path == EXPECTED[(arch, head)]
    assert len(stack) == 4
    assert loaded.dtype == "float32" and loaded.source == "local"


def test_embedded_minilm():
    loaded = load_model("minilm", device="cpu")
    assert find_blocks(loaded.model).path == "encoder.layer"
    assert len(find_blocks(loaded.model)) == 6 and loaded.source == "embedded"


@pytest.mark.parametrize("config", [
    transformers.GPTNeoXConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32),
    transformers.OPTConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, ffn_dim=32, word_embed_proj_dim=16),
    transformers.PhiConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32),
    transformers.FalconConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2),
], ids=["gpt_neox", "opt", "phi", "falcon"])
def test_other_families(config):
    model = transformers.AutoModelForCausalLM.from_config(config)
    stack = find_blocks(model)
    assert len(stack) == 3
    assert stack.path in ("gpt_neox.layers", "model.decoder.layers", "model.layers", "transformer.h")


class Custom(torch.nn.Module):
    """An unknown architecture: the dominant list of identical blocks must win over a small side list."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.ModuleList([torch.nn.Linear(32, 32) for _ in range(5)])
        self.heads = torch.nn.ModuleList([torch.nn.Linear(32, 2) for _ in range(3)])


def test_dominant_list_and_override():
    assert find_blocks(Custom()).path == "trunk"
    assert find_blocks(Custom(), "heads").path == "heads"


def test_no_blocks_lists_candidates():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])

    with pytest.raises(ArchitectureError, match=r"parts \(2 x Linear\)"):
        find_blocks(Mixed())
