"""--part attn|mlp: the model with a sub-layer removed against a copy whose sub-layer forward is replaced by hand
(zero for Pre-LN branches; the residual input for Post-LN BERT, whose module adds the residual itself)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import transformers
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.models.layers import find_blocks
from layerprobe.models.surgery import removed_sublayers

from tests.helpers import assert_error, jitter_norms, zero_by_hand

runner = CliRunner()
IDS = torch.tensor([[5, 17, 230, 41, 999, 12, 7, 88, 300, 2], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]])


@pytest.mark.parametrize("arch,how", [("llama", "branch"), ("qwen2", "branch"), ("gpt2", "branch"), ("bert", "branch"),
                                      ("bert", "module"), ("llama", "module")])
@pytest.mark.parametrize("part", ["attn", "mlp"])
def test_removed_sublayers_equal_hand_replaced_forwards(arch, how, part, model_dirs):
    cls = transformers.AutoModel if arch == "bert" else transformers.AutoModelForCausalLM
    model = jitter_norms(cls.from_pretrained(model_dirs[arch]).eval())
    reference = zero_by_hand(jitter_norms(cls.from_pretrained(model_dirs[arch]).eval()), arch, part, [1, 3], how)
    stack = find_blocks(model)
    stack.sublayer = how
    with torch.no_grad():
        before = model(input_ids=IDS)
        with removed_sublayers(model, [1, 3], part, stack):
            got = model(input_ids=IDS)
        after = model(input_ids=IDS)
        want = reference(input_ids=IDS)
    field = "last_hidden_state" if arch == "bert" else "logits"
    torch.testing.assert_close(getattr(got, field), getattr(want, field), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(getattr(after, field), getattr(before, field), atol=0, rtol=0)  # undone exactly
    assert not torch.allclose(getattr(got, field), getattr(before, field))  # something was removed


def test_part_sweep_shared_prefix_equals_plain_and_hand(model_dirs, tmp_path):
    folder = model_dirs["llama"]
    data = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "4"]
    for name, extra in (("shared", []), ("plain", ["--no-shared-prefix"])):
        result = runner.invoke(app, ["prune", str(folder), "--task", "ppl", "--part", "attn", *data, *extra,
                                     "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    shared, plain = (pd.read_csv(tmp_path / n / "prune.csv") for n in ("shared", "plain"))
    assert shared["pruned"].to_numpy() == pytest.approx(plain["pruned"].to_numpy(), rel=1e-6)
    from tests.helpers import reference_metric

    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    for row in shared.itertuples():
        hand = zero_by_hand(transformers.AutoModelForCausalLM.from_pretrained(folder).eval(), "llama", "attn", [row.layer])
        assert row.pruned == pytest.approx(reference_metric("ppl", full, hand, folder, 128, 32, 4), rel=1e-5)


def test_unknown_sublayer_is_one_line(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=len(tokenizer), hidden_size=32, ffn_dim=64, num_hidden_layers=3,
                                    num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=32)
    transformers.OPTForCausalLM(config).save_pretrained(tmp_path / "opt")
    tokenizer.save_pretrained(tmp_path / "opt")
    result = runner.invoke(app, ["prune", str(tmp_path / "opt"), "--task", "kl", "--part", "mlp", "--dataset",
                                 "builtin", "--tokens", "64", "--seq-len", "32", "--out", str(tmp_path / "run")])
    assert_error(result, "--part mlp: OPTDecoderLayer (opt) has no mlp sub-layer")


def test_post_ln_definitions_differ_and_pre_ln_agree(model_dirs):
    """Post-LN BERT: branch (LayerNorm(x + 0)) and module (x) give different outputs; Pre-LN LLaMA: the same."""
    outputs = {}
    for arch, cls, field in (("bert", transformers.AutoModel, "last_hidden_state"),
                             ("llama", transformers.AutoModelForCausalLM, "logits")):
        model = jitter_norms(cls.from_pretrained(model_dirs[arch]).eval())
        stack = find_blocks(model)
        for how in ("branch", "module"):
            stack.sublayer = how
            with torch.no_grad(), removed_sublayers(model, [1], "attn", stack):
                outputs[arch, how] = getattr(model(input_ids=IDS), field)
    assert not torch.allclose(outputs["bert", "branch"], outputs["bert", "module"], atol=1e-3)
    torch.testing.assert_close(outputs["llama", "branch"], outputs["llama", "module"], atol=0, rtol=0)
