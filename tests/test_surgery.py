"""removed_layers against independently built shorter models, and exact restoration."""

from __future__ import annotations


import pytest
import torch
import transformers

from layerprobe.models.layers import find_blocks, layer_index_owners
from layerprobe.models.load import load_model
from layerprobe.models.surgery import removed_layers

from tests.helpers import independent_pruned

HEAD = {"llama": "causal-lm", "qwen2": "causal-lm", "gpt2": "causal-lm", "bert": "masked-lm"}


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "bert"])
@pytest.mark.parametrize("drop", [[1], [0, 2], [3]])
def test_pruned_equals_independent_and_restores(arch, drop, model_dirs):
    folder = model_dirs[arch]
    loaded = load_model(str(folder), head=HEAD[arch], device="cpu")
    model = loaded.model
    ids = torch.randint(5, 1000, (2, 17), generator=torch.Generator().manual_seed(1))
    before = logits(model, ids)
    params_before = [(n, p.data_ptr()) for n, p in model.named_parameters()]
    idx_before = [m.layer_idx for b in find_blocks(model).blocks for m in layer_index_owners(b)]
    cls = transformers.BertForMaskedLM if arch == "bert" else transformers.AutoModelForCausalLM
    reference = logits(independent_pruned(folder, cls, drop), ids)
    with removed_layers(model, reversed(drop)):  # order of the request must not matter
        stack = find_blocks(model)
        assert len(stack) == 4 - len(drop)
        assert model.config.num_hidden_layers == 4 - len(drop)
        owners = [m.layer_idx for b in stack.blocks for m in layer_index_owners(b)]
        if owners:
            assert sorted(set(owners)) == list(range(4 - len(drop)))
        pruned = logits(model, ids)
    torch.testing.assert_close(pruned, reference, rtol=0, atol=1e-5)
    after = logits(model, ids)
    assert torch.equal(after, before)
    assert [(n, p.data_ptr()) for n, p in model.named_parameters()] == params_before
    assert model.config.num_hidden_layers == 4
    assert [m.layer_idx for b in find_blocks(model).blocks for m in layer_index_owners(b)] == idx_before


def test_layer_types_follow_the_blocks(model_dirs):
    loaded = load_model(str(model_dirs["qwen2"]), head="causal-lm", device="cpu")
    config = loaded.model.config
    config.layer_types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    with removed_layers(loaded.model, [1]):
        assert config.layer_types == ["full_attention", "full_attention", "sliding_attention"]
    assert config.layer_types[1] == "sliding_attention"


def test_restores_after_an_exception(model_dirs):
    loaded = load_model(str(model_dirs["gpt2"]), head="causal-lm", device="cpu")
    blocks = find_blocks(loaded.model).blocks
    with pytest.raises(RuntimeError):
        with removed_layers(loaded.model, [2]):
            raise RuntimeError("boom")
    assert find_blocks(loaded.model).blocks is blocks and len(blocks) == 4
