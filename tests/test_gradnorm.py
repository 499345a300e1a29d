"""In-house placements against their formulas; gradient norms against a hand-unrolled autograd computation."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import transformers

from layerprobe.commands.gradnorm.measure import measure_gradients as measure
from layerprobe.models.inhouse import ProbeLlamaForCausalLM, make_config
from layerprobe.models.layers import find_blocks

from .helpers import assert_error, invoke


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
        variance = rows[(rows.layer == layer) & (rows.kind == "variance")]["variance"].item()
        out = xs[layer + 1].detach().double()
        by_hand = ((out - out.mean(-1, keepdim=True)) ** 2).mean(-1).mean().item()  # per-token variance, averaged
        assert variance == pytest.approx(by_hand, rel=1e-9)
    assert all(p.requires_grad for p in model.parameters())  # embeddings and head unfrozen again


def test_inhouse_folder_round_trips_and_probes(tmp_path, tokenizer):
    model = tiny("mix")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(tmp_path / "inhouse")
    tokenizer.save_pretrained(tmp_path / "inhouse")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "inhouse").eval()
    ids = torch.randint(0, 1000, (1, 7))
    assert torch.equal(again(ids).logits, model(ids).logits)
    result = invoke("angular", str(tmp_path / "inhouse"), "--dataset", "builtin", "--tokens", "256",
                    "--seq-len", "64", "--device", "cpu", "--out", str(tmp_path / "ang"))
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(tmp_path / "ang" / "angular.csv")) == 10


def test_gradnorm_cli_end_to_end(tmp_path):
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre,post", "--seeds", "2", "--batches", "1",
                    "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2", "--device", "cpu",
                    "--out", str(tmp_path / "g"))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "g" / "gradnorm.csv")
    assert {"norm", "layer", "kind", "grad_norm", "std", "module"} <= set(table.columns)
    assert set(table["norm"]) == {"pre", "post"} and (table["samples"] == 2).all()
    assert (tmp_path / "g" / "gradnorm.png").is_file()


def test_a_spread_of_one_sample_is_empty_never_zero(tmp_path):
    """gradnorm.csv's and variance.csv's std is the sample standard deviation (n - 1) of gradnorm_samples.csv's
    values, computed here with numpy; one seed x one batch measures no spread: std is empty, where it was 0.0 (a
    spread of zero claimed), and the run still reads back (report) with it empty."""
    import numpy as np

    for seeds, out in (("2", tmp_path / "two"), ("1", tmp_path / "one")):
        result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", seeds, "--batches", "1",
                        "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2", "--device", "cpu",
                        "--out", str(out))
        assert result.exit_code == 0, result.output
    for out, n in ((tmp_path / "two", 2), (tmp_path / "one", 1)):
        samples = pd.read_csv(out / "gradnorm_samples.csv")
        for name, keys, value in (("gradnorm.csv", ["norm", "step", "layer", "kind", "module"], "grad_norm"),
                                  ("variance.csv", ["norm", "step", "layer"], "variance")):
            table = pd.read_csv(out / name)
            assert (table["samples"] == n).all()
            rows = samples[samples["kind"] != "variance"] if value == "grad_norm" else samples[samples["kind"] == "variance"]
            for row in table.itertuples(index=False):
                picked = rows
                for key in keys:
                    picked = picked[picked[key] == getattr(row, key)]
                values = picked[value].to_numpy(dtype=float)
                assert len(values) == n
                if n == 1:
                    assert math.isnan(row.std), (name, row)
                else:
                    assert row.std == pytest.approx(np.std(values, ddof=1), rel=1e-9, abs=1e-12), (name, row)
    assert ",," in (tmp_path / "one" / "gradnorm.csv").read_text()  # written empty, not nan
    assert invoke("report", tmp_path / "one", "--out", tmp_path / "page").exit_code == 0


def test_lr_schedule_by_hand():
    from layerprobe.config import TrainSettings
    from layerprobe.models.training import lr_factor

    s = TrainSettings(steps=10, lr=1.0, warmup=2)
    assert [lr_factor(i, s) for i in (0, 1)] == [0.5, 1.0]  # linear warmup
    assert lr_factor(2, s) == pytest.approx(1.0)  # cosine starts at the peak
    assert lr_factor(6, s) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert lr_factor(10, s) == pytest.approx(0.1)  # ends at 10%


def test_training_matches_a_plain_adamw_loop():
    from layerprobe.config import TrainSettings
    from layerprobe.models.training import lr_factor, train

    settings = TrainSettings(steps=4, lr=3e-3, warmup=1, clip=0.5)
    batches = [torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    model, reference = tiny("lns"), tiny("lns")
    losses = []
    train(model, iter((b, torch.ones_like(b), b) for b in batches), settings, lambda step, loss: losses.append(loss))
    # Reference: torch's AdamW stepped by hand, lr set per step, loss written out from the logits.
    opt = torch.optim.AdamW(reference.parameters(), lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    for step, ids in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = settings.lr * lr_factor(step, settings)
        opt.zero_grad()
        logits = reference(ids).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.5)
        opt.step()
        assert losses[step] == pytest.approx(loss.item(), rel=1e-5)
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, msg=name)


def test_gradnorm_steps_cli(tmp_path):
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre,lns", "--seeds", "1", "--batches", "1",
                    "--steps", "6", "--record-steps", "0,3,6", "--lr", "3e-3", "--dataset", "builtin",
                    "--seq-len", "32", "--batch-size", "2", "--device", "cpu", "--out", str(tmp_path / "g"))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "g" / "gradnorm.csv")
    variance = pd.read_csv(tmp_path / "g" / "variance.csv")
    loss = pd.read_csv(tmp_path / "g" / "loss.csv")
    assert sorted(table["step"].unique()) == [0, 3, 6] and sorted(variance["step"].unique()) == [0, 3, 6]
    assert len(variance) == 2 * 3 * 4 and (variance["variance"] > 0).all()
    assert sorted(loss["step"].unique()) == list(range(1, 7)) and set(loss["norm"]) == {"pre", "lns"}
    assert (tmp_path / "g" / "variance.png").is_file()
    summary = (tmp_path / "g" / "summary.json").read_text()
    assert '"steps": 6' in summary and "final_loss" in summary


def test_gradnorm_steps_watches_training_as_the_monitor_does(tmp_path):
    """training.csv: layerprobe.integrations' measurement of each job while it trains. Step 0's d(l, 1) equals HF's
    own hidden states of the same initialization on the measuring batches; step 1's gradient norms equal a hand
    backward of the first training batch (no clipping); measuring more often changes neither the losses nor what
    is measured at the steps both runs share."""
    from layerprobe.data.corpora import open_corpus
    from layerprobe.models.inhouse import build
    from layerprobe.models.load import embedded_model_dir

    common = ["gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", "1", "--batches", "1", "--steps", "6",
              "--lr", "3e-3", "--clip", "0", "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2",
              "--device", "cpu"]
    for every in (1, 3):
        result = invoke(*common, "--monitor-every", str(every), "--out", str(tmp_path / str(every)))
        assert result.exit_code == 0, result.output
    often, seldom = (pd.read_csv(tmp_path / name / "training.csv") for name in ("1", "3"))
    assert sorted(often["step"].unique()) == list(range(7)) and sorted(seldom["step"].unique()) == [0, 3, 6]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "1" / "loss.csv"), pd.read_csv(tmp_path / "3" / "loss.csv"))
    shared = often[often["step"].isin([0, 3, 6])].reset_index(drop=True)
    pd.testing.assert_frame_equal(shared, seldom)

    tok = transformers.AutoTokenizer.from_pretrained(embedded_model_dir())
    torch.manual_seed(0)
    model = build(make_config("tiny", "pre", vocab_size=len(tok), max_position_embeddings=1024), "cpu",
                  torch.float32).eval()
    texts = list(open_corpus("builtin").texts())
    from layerprobe.data.packing import batches

    first = next(iter(batches(texts, tok, 32, 2, 64)))
    states = []  # each block's input, then the last block's output, by plain forward hooks
    hooks = [block.register_forward_pre_hook(lambda _, args: states.append(args[0])) for block in model.model.layers]
    hooks.append(model.model.layers[-1].register_forward_hook(
        lambda _, args, output: states.append(output[0] if isinstance(output, tuple) else output)))
    with torch.no_grad():
        model(input_ids=first.input_ids, attention_mask=first.attention_mask)
    for hook in hooks:
        hook.remove()
    keep = first.attention_mask.flatten().bool()
    flat = [x.reshape(-1, x.shape[-1])[keep].double() for x in states]
    expected = [float(torch.arccos(F.cosine_similarity(a, b, dim=-1).clamp(-1, 1)).mean()) / math.pi
                for a, b in zip(flat, flat[1:])]
    start = often[often["step"] == 0].sort_values("layer")
    assert start["distance_next"].tolist()[:4] == pytest.approx(expected, rel=1e-6)
    model.zero_grad()
    model(input_ids=first.input_ids, attention_mask=first.attention_mask, labels=first.input_ids).loss.backward()
    by_hand = [math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in block.parameters()))
               for block in model.model.layers]
    step1 = often[(often["step"] == 1) & often["grad_norm"].notna()].sort_values("layer")
    assert step1["grad_norm"].tolist() == pytest.approx(by_hand, rel=1e-5)
    summary = (tmp_path / "1" / "summary.json").read_text()
    assert '"training"' in summary and '"monitor_every": 1' in summary
    assert (tmp_path / "1" / "training.png").is_file()


def test_build_allocates_once_in_the_asked_dtype():
    from layerprobe.models.inhouse import ProbeLlamaForCausalLM, build

    torch.manual_seed(0)
    model = build(make_config("tiny", "deepnorm", vocab_size=1000), "cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert float(model.model.embed_tokens.weight.detach().float().std()) == pytest.approx(0.02, rel=0.05)
    assert torch.equal(model.model.layers[0].attn_norm.weight.float(), torch.ones(64))
    v = model.model.layers[1].self_attn.v_proj.weight.detach().float()
    assert float(v.std()) == pytest.approx((8 * 4) ** -0.25 * math.sqrt(2 / (64 + 64)), rel=0.1)  # DeepNet init
    # llama-7b (Mix-LN Table 7) on the meta device: no memory, parameter count from the shapes by hand
    with torch.device("meta"):
        big = ProbeLlamaForCausalLM(make_config("llama-7b", "pre", vocab_size=32000))
    d, f, L, V = 4096, 11008, 32, 32000
    assert sum(p.numel() for p in big.parameters()) == 2 * V * d + L * (4 * d * d + 3 * d * f + 2 * d) + d
    assert all(p.is_meta for p in big.parameters())


@pytest.mark.parametrize("args,needle", [
    (["--arch", "tiny", "--steps", "4", "--record-steps", "0,9"], "--record-steps"),
    (["--arch", "tiny", "--steps", "-1"], "--steps"),
    (["--arch", "tiny", "--steps", "4", "--lr", "0"], "--lr"),
    (["--arch", "llama-13m"], "Did you mean: llama-130m"),
    (["--arch", "tiny", "--norm", "pre,middle"], "middle"),
    (["--arch", "tiny", "--alpha", "1.5"], "[0, 1]"),
    (["--arch", "tiny", "--reinit"], "--reinit"),
    (["minilm", "--reinit", "--device-map", "auto"], "--reinit builds the fresh model on one device"),
])
def test_gradnorm_bad_input(args, needle):
    result = invoke("gradnorm", "--dataset", "builtin", *args)
    assert_error(result, needle)


@pytest.mark.parametrize("arch,extra,label", [("gpt2", [], "as-is"), ("bert", ["--reinit"], "reinit")])
def test_gradnorm_on_checkpoints(arch, extra, label, model_dirs, tmp_path):
    result = invoke("gradnorm", str(model_dirs[arch]), *extra, "--seeds", "1", "--batches", "1",
                    "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2",
                    "--out", str(tmp_path / "g"))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "g" / "gradnorm.csv")
    assert set(table["norm"]) == {label} and sorted(set(table["layer"])) == [0, 1, 2, 3]
    assert (table[(table.kind == "params") & (table.module == "block")]["grad_norm"] > 0).all()


@pytest.mark.parametrize("head_trains", [False, True])
def test_fused_head_cross_entropy_matches_torch(head_trains, monkeypatch):
    import layerprobe.models.inhouse.fused_loss as fused

    monkeypatch.setattr(fused, "CHUNK_ROWS", 96)  # several chunks, one partly ignored, one wholly ignored
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 150, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = (torch.randn(40, 16, dtype=torch.float64, generator=gen) * 0.3).requires_grad_(head_trains)
    target = torch.randint(0, 40, (2, 150), generator=gen)
    target[1, 40:] = -100
    loss = fused.linear_cross_entropy(hidden, weight, target)
    (loss * 3.0).backward()
    got = [hidden.grad.clone()] + ([weight.grad.clone()] if head_trains else [])
    hidden.grad = weight.grad = None
    reference = F.cross_entropy((hidden @ weight.T).reshape(-1, 40), target.reshape(-1), ignore_index=-100)
    (reference * 3.0).backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-12)
    for a, b in zip(got, [hidden.grad] + ([weight.grad] if head_trains else [])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_checkpoint_without_lm_head_is_refused(tmp_path, tokenizer):
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    base = transformers.LlamaModel(tiny_config("llama", len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id))
    base.save_pretrained(tmp_path / "base")  # decoder blocks, no lm_head
    tokenizer.save_pretrained(tmp_path / "base")
    result = invoke("gradnorm", str(tmp_path / "base"), "--dataset", "builtin", "--seq-len", "32",
                    "--batch-size", "2", "--out", str(tmp_path / "run"))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "has no trained causal-LM head (lm_head.weight missing)" in text, text
    assert not (tmp_path / "run").exists()
    result = invoke("gradnorm", str(tmp_path / "base"), "--reinit", "--dataset", "builtin", "--seq-len",
                    "32", "--batch-size", "2", "--seeds", "1", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output  # at initialization a random head is the point


def test_placements_of_one_seed_share_one_initialization():
    from layerprobe.models.inhouse import build, shares_init

    configs = {p: make_config("tiny", p, vocab_size=50) for p in ("pre", "post", "mix", "lns", "deepnorm", "sandwich")}
    torch.manual_seed(7)
    first = build(configs["pre"])
    reference = {name: t.clone() for name, t in first.state_dict().items()}
    for placement in ("post", "mix", "lns"):
        torch.manual_seed(7)
        fresh = build(configs[placement])  # drawn again: what taking over the weights must equal
        shared = build(configs[placement], like=first)
        assert shared.model.layers[0].placement == configs[placement].placement(0)
        for name, tensor in fresh.state_dict().items():
            assert torch.equal(shared.state_dict()[name], tensor) and torch.equal(reference[name], tensor), name
        assert shared.lm_head.weight.data_ptr() == first.lm_head.weight.data_ptr()  # taken over, not copied
    assert not shares_init(configs["pre"], configs["deepnorm"]) and not shares_init(configs["sandwich"], configs["pre"])
    assert not shares_init(configs["pre"], make_config("tiny", "post", vocab_size=51))
    with pytest.raises(ValueError):
        build(configs["deepnorm"], like=first)


def test_progress_counts_every_pass(tmp_path):
    from layerprobe.config import DataOptions, GradnormConfig
    from layerprobe.commands.gradnorm.run import run_gradnorm

    calls = []
    config = GradnormConfig(arch="tiny", norms=("pre", "deepnorm"), seeds=2, batches=3, device="cpu",
                            data=DataOptions(dataset="builtin", seq_len=16, batch_size=2, tokens=0),
                            out=str(tmp_path / "g"))
    run = run_gradnorm(config, lambda stage, done, total: calls.append((stage, done, total)))
    # 2 placements x 2 seeds x 3 batches: one tick per forward + backward pass, in order
    assert calls == [("passes", i, 12) for i in range(13)]
    assert (run.table["samples"] == 6).all()


def test_interrupted_run_resumes_with_only_the_unfinished_jobs(tmp_path):
    from layerprobe.config import DataOptions, GradnormConfig
    from layerprobe.errors import RunError
    from layerprobe.commands.gradnorm.run import run_gradnorm

    def settings(**kw):
        return GradnormConfig(arch="tiny", norms=("pre", "post"), seeds=2, batches=2, device="cpu",
                              data=DataOptions(dataset="builtin", seq_len=16, batch_size=2, tokens=0), **kw)

    whole = run_gradnorm(settings(out=str(tmp_path / "whole")))

    def ctrl_c_in_job_3(stage, done, total):
        if done == 5:  # the first pass of the third job: two jobs are finished
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_gradnorm(settings(out=str(tmp_path / "cut")), ctrl_c_in_job_3)
    assert len(list((tmp_path / "cut" / "jobs").glob("*-seed*.json"))) == 2
    assert not (tmp_path / "cut" / "gradnorm.csv").exists()
    with pytest.raises(RunError, match="different settings"):  # --mix-alpha: nothing without mix
        run_gradnorm(settings(out=str(tmp_path / "cut"), resume=True, norm_type="layernorm"))
    calls = []
    resumed = run_gradnorm(settings(out=str(tmp_path / "cut"), resume=True), lambda *c: calls.append(c))
    assert resumed.folder == tmp_path / "cut" and any("2 finished job(s)" in w for w in resumed.warnings)
    assert [c[1] for c in calls] == [0, 2, 4, 5, 6, 7, 8]  # two jobs read back at once, then pass by pass
    pd.testing.assert_frame_equal(resumed.table, whole.table, check_exact=True)
    assert not (tmp_path / "cut" / "jobs").exists()  # finished: nothing left to resume
    with pytest.raises(RunError, match="holds a finished gradnorm run: nothing to resume"):
        run_gradnorm(settings(out=str(tmp_path / "cut"), resume=True))
    assert not (tmp_path / "cut" / ".layerprobe.lock").exists()  # the refusal changed nothing
    with pytest.raises(RunError, match="does not exist"):
        run_gradnorm(settings(out=str(tmp_path / "never"), resume=True))
