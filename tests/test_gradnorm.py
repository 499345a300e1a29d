"""In-house placements against their formulas; gradient norms against a hand-unrolled autograd computation."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import transformers
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.gradnorm import measure
from layerprobe.models.inhouse import ProbeLlamaForCausalLM, make_config
from layerprobe.models.layers import find_blocks

runner = CliRunner()


def tiny(placement, **kw):
    torch.manual_seed(0)
    return ProbeLlamaForCausalLM(make_config("tiny", placement, vocab_size=50, **kw)).eval()


@pytest.mark.parametrize("placement", ["pre", "post", "lns", "deepnorm", "sandwich"])
def test_block_formulas(placement):
    model = tiny(placement)
    x = torch.randn(2, 6, 64)
    rope = model.model.rotary(torch.arange(6), x.dtype)
    for index, block in enumerate(model.model.layers):
        def attn(h):
            return block.self_attn(h, rope, None)
        n1, n2, f = block.attn_norm, block.mlp_norm, block.mlp
        if placement == "pre":
            h = x + attn(n1(x)); want = h + f(n2(h))
        elif placement == "post":
            h = n1(x + attn(x)); want = n2(h + f(h))
        elif placement == "lns":
            s = 1 / math.sqrt(index + 1)
            h = x + attn(n1(x) * s); want = h + f(n2(h) * s)
        elif placement == "deepnorm":
            a = (2 * 4) ** 0.25
            h = n1(a * x + attn(x)); want = n2(a * h + f(h))
        else:
            h = x + block.attn_out_norm(attn(n1(x))); want = h + block.mlp_out_norm(f(n2(h)))
        torch.testing.assert_close(block(x, position_embeddings=rope), want)


def test_mix_uses_post_then_pre():
    model = tiny("mix", mix_alpha=0.5)
    assert [b.placement for b in model.model.layers] == ["post", "post", "pre", "pre"]
    assert [b.placement for b in tiny("mix").model.layers] == ["post", "pre", "pre", "pre"]  # floor(0.25 * 4) = 1


def test_deepnorm_init_scales_value_weights():
    model = tiny("deepnorm")
    v = model.model.layers[0].self_attn.v_proj.weight
    expected = (8 * 4) ** -0.25 * math.sqrt(2 / (64 + 64))
    assert v.std().item() == pytest.approx(expected, rel=0.1)


def test_gradient_norms_match_hand_unrolled_autograd():
    model = tiny("pre")
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    rows = pd.DataFrame(measure(model, find_blocks(model), [(ids, mask)], False, None, 0))
    # Independent: run the stack by hand, keep every block input, differentiate the same loss.
    inner = model.model
    xs = [inner.embed_tokens(ids)]
    rope = inner.rotary(torch.arange(8), xs[0].dtype)
    for block in inner.layers:
        xs.append(block(xs[-1], position_embeddings=rope))
    logits = model.lm_head(inner.norm(xs[-1]))
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
    for layer, block in enumerate(inner.layers):
        params = list(block.parameters())
        grads = torch.autograd.grad(loss, [xs[layer]] + params, retain_graph=True)
        per_token = grads[0].double().norm(dim=-1).mean().item()
        whole = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads[1:]))
        attn = math.sqrt(sum(float(g.double().pow(2).sum()) for g in torch.autograd.grad(
            loss, list(block.self_attn.parameters()), retain_graph=True)))
        got = rows[rows.layer == layer].set_index(["kind", "module"])["grad_norm"]
        assert got[("input", "block")] == pytest.approx(per_token, rel=1e-6)
        assert got[("params", "block")] == pytest.approx(whole, rel=1e-6)
        assert got[("params", "attn")] == pytest.approx(attn, rel=1e-6)


def test_inhouse_folder_round_trips_and_probes(tmp_path, tokenizer):
    model = tiny("mix")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(tmp_path / "inhouse")
    tokenizer.save_pretrained(tmp_path / "inhouse")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "inhouse").eval()
    ids = torch.randint(0, 1000, (1, 7))
    assert torch.equal(again(ids).logits, model(ids).logits)
    result = runner.invoke(app, ["angular", str(tmp_path / "inhouse"), "--dataset", "builtin", "--tokens", "256",
                                 "--seq-len", "64", "--device", "cpu", "--out", str(tmp_path / "ang")])
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(tmp_path / "ang" / "angular.csv")) == 10


def test_gradnorm_cli_end_to_end(tmp_path):
    result = runner.invoke(app, ["gradnorm", "--arch", "tiny", "--norm", "pre,post", "--seeds", "2", "--batches", "1",
                                 "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2", "--device", "cpu",
                                 "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "g" / "gradnorm.csv")
    assert {"norm", "layer", "kind", "grad_norm", "std", "module"} <= set(table.columns)
    assert set(table["norm"]) == {"pre", "post"} and (table["samples"] == 2).all()
    assert (tmp_path / "g" / "gradnorm.png").is_file()


@pytest.mark.parametrize("args,needle", [
    (["--arch", "llama-13m"], "Did you mean: llama-130m"),
    (["--arch", "tiny", "--norm", "pre,middle"], "middle"),
    (["--arch", "tiny", "--alpha", "1.5"], "[0, 1]"),
    (["--arch", "tiny", "--reinit"], "--reinit"),
])
def test_gradnorm_bad_input(args, needle):
    result = runner.invoke(app, ["gradnorm", "--dataset", "builtin", *args])
    assert result.exit_code == 2 and needle in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("arch,extra,label", [("gpt2", [], "as-is"), ("bert", ["--reinit"], "reinit")])
def test_gradnorm_on_checkpoints(arch, extra, label, model_dirs, tmp_path):
    result = runner.invoke(app, ["gradnorm", str(model_dirs[arch]), *extra, "--seeds", "1", "--batches", "1",
                                 "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2",
                                 "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "g" / "gradnorm.csv")
    assert set(table["norm"]) == {label} and sorted(set(table["layer"])) == [0, 1, 2, 3]
    assert (table[(table.kind == "params") & (table.module == "block")]["grad_norm"] > 0).all()
