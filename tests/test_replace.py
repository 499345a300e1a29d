"""heal --method lstsq|cosine|tail and prune --curve --heal: each against an independent reference (numpy's
least squares on activations captured here by plain hooks, the fold written out by hand, a hand forward that puts
x_i - m + m T in place of the removed blocks, a hand AdamW loop, a fresh process without layerprobe)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from safetensors.torch import load_file
from scipy import stats

from .helpers import assert_error, independent_pruned, invoke, reload_without_layerprobe

DATA = ["--dataset", "builtin", "--tokens", "256", "--seq-len", "32", "--batch-size", "4"]
CALIBRATION = 512  # token positions after the held-out 256: 4 batches of 4 x 32
FIT = [*DATA, "--calibration-tokens", str(CALIBRATION), "--no-gain"]


def calibration_batches(folder) -> torch.Tensor:
    """(n, 4, 32): the full packed sequences after the held-out ones, packed here from the documented rule."""
    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import batches, packed_sequences

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    heldout = list(batches(open_corpus("builtin").texts(), tok, 32, 4, 256))
    skip = sum(b.input_ids.shape[0] for b in heldout)
    rows = [r for r in packed_sequences(open_corpus("builtin").texts(), tok, 32, skip * 32 + CALIBRATION)][skip:]
    rows = [r for r in rows if len(r) == 32]
    return torch.tensor(rows).view(-1, 4, 32)


def hand_forward(model, ids, runs: dict, record: dict | None = None) -> torch.Tensor:
    """Logits of `model` (every block present) where the output of each run's last block is replaced by
    x_i - m + m T (x_i: the input of the run's first block, m: the down_proj output of the block before it, T the
    run's map, or the identity where None). record[(i, j)] collects (m, x_i, x_{j+1}) as they flow."""
    blocks, seen, handles = model.model.layers, {}, []
    for (i, j), T in runs.items():
        def on_down(module, args, output, key=(i, j)):
            seen[key, "m"] = output

        def on_first(module, args, kwargs, key=(i, j)):
            seen[key, "x"] = args[0] if args else kwargs["hidden_states"]

        def on_last(module, args, output, key=(i, j), T=T):
            hidden = output[0] if isinstance(output, tuple) else output
            if record is not None:
                record.setdefault(key, []).append((seen[key, "m"], seen[key, "x"], hidden))
            m, x = seen[key, "m"], seen[key, "x"]
            replaced = x if T is None else x - m + (m.double() @ T).float()
            return (replaced, *output[1:]) if isinstance(output, tuple) else replaced

        handles += [blocks[i - 1].mlp.down_proj.register_forward_hook(on_down),
                    blocks[i].register_forward_pre_hook(on_first, with_kwargs=True),
                    blocks[j].register_forward_hook(on_last)]
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits
    finally:
        for handle in handles:
            handle.remove()


def naive_lstsq(triples) -> np.ndarray:
    m = np.concatenate([t[0].reshape(-1, t[0].shape[-1]).double().numpy() for t in triples])
    x = np.concatenate([t[1].reshape(-1, t[1].shape[-1]).double().numpy() for t in triples])
    y = np.concatenate([t[2].reshape(-1, t[2].shape[-1]).double().numpy() for t in triples])
    return np.linalg.lstsq(m, y - x + m, rcond=None)[0]


@pytest.mark.parametrize("arch,remove,runs", [("llama", "1,3", [(1, 1), (3, 3)]), ("qwen2", "1-2", [(1, 2)])])
def test_lstsq_maps_folds_and_outputs_match_hand_references(arch, remove, runs, model_dirs, tmp_path):
    folder, out = model_dirs[arch], tmp_path / "run"
    result = invoke("heal", str(folder), "--remove", remove, "--method", "lstsq", *FIT, "--out", str(out))
    assert result.exit_code == 0, result.output
    maps = load_file(out / "transform.safetensors")
    labels = [f"{i}" if i == j else f"{i}-{j}" for i, j in runs]
    assert sorted(maps) == sorted(labels) and all(T.dtype == torch.float64 for T in maps.values())
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    calibration = calibration_batches(folder)
    # in order: run r's map from activations of the model with runs < r replaced by their maps (r's identity)
    for r, (run, label) in enumerate(zip(runs, labels)):
        applied = {key: (maps[lab] if n < r else None) for n, (key, lab) in enumerate(zip(runs, labels)) if n <= r}
        record: dict = {}
        for ids in calibration:
            hand_forward(full, ids, applied, record)
        # later runs: layerprobe's model holds the folded float32 weights, the hand forward applies T in float64
        tolerance = dict(rtol=1e-6, atol=1e-8) if r == 0 else dict(rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(maps[label].numpy(), naive_lstsq(record[run]), **tolerance)
    # the fold: merged/'s down_proj of block i-1 is T^T W, written out by hand
    merged = transformers.AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    kept = [b for b in range(4) if not any(i <= b <= j for i, j in runs)]
    for (i, _), label in zip(runs, labels):
        W = full.model.layers[i - 1].mlp.down_proj.weight.double()
        want = (maps[label].T @ W).float()
        got = merged.model.layers[kept.index(i - 1)].mlp.down_proj.weight
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    # the shortened model computes what a hand forward with x_i - m + m T in place of the removed blocks computes
    ids = torch.tensor([[5, 9, 14, 3, 7, 21, 8, 2]])
    expected = hand_forward(full, ids, {run: maps[label] for run, label in zip(runs, labels)})
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, atol=1e-4, rtol=1e-4)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "lstsq" and summary["num_layers_healed"] == len(kept)
    assert summary["calibration"]["tokens"] == calibration.numel() == CALIBRATION
    assert summary["calibration"]["first_position"] == 256  # right after the held-out positions
    table = pd.read_csv(out / "replace.csv")
    assert list(table["run"].astype(str)) == labels and (table["mse_fitted"] <= table["mse_removed"]).all()


@pytest.mark.parametrize("arch,remove,drop", [("llama", "2", [2]), ("qwen2", "1,3", [1, 3])])
def test_heldout_before_and_after_are_the_shortened_and_repaired_models_scores(arch, remove, drop, model_dirs,
                                                                               tmp_path):
    """The scores (computed with the blocks before the first fold run once per batch) are those of plain forwards
    of the unpruned model, a shortened model built here by copying weights, and the merged/ checkpoint."""
    from .helpers import reference_metric

    folder, out = model_dirs[arch], tmp_path / "run"
    result = invoke("heal", str(folder), "--remove", remove, "--method", "lstsq", *FIT, "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    removed = independent_pruned(folder, transformers.AutoModelForCausalLM, drop)
    repaired = transformers.AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    assert summary["heldout_unpruned_ppl"] == pytest.approx(reference_metric("ppl", full, full, folder, 256, 32, 4),
                                                           rel=1e-5)
    for when, model in (("heldout_before", removed), ("heldout_after", repaired)):
        assert summary[when]["ppl"] == pytest.approx(reference_metric("ppl", full, model, folder, 256, 32, 4), rel=1e-5)
        assert summary[when]["kl"] == pytest.approx(reference_metric("kl", full, model, folder, 256, 32, 4),
                                                    rel=1e-4, abs=1e-7)
    table = pd.read_csv(out / "heal.csv")
    assert list(table["step"]) == [0, 1] and table["heldout_ppl"].iloc[1] == pytest.approx(summary["heldout_after"]["ppl"])


def cosine_objective(T: np.ndarray, m, x, y) -> float:
    made = m @ T + x - m
    cos = (made * y).sum(-1) / (np.linalg.norm(made, axis=-1) * np.linalg.norm(y, axis=-1))
    return float(np.mean(1 - cos))


def test_cosine_is_no_worse_than_lstsq_on_its_objective(model_dirs, tmp_path):
    """cosine lowers its objective from the lstsq start at a working rate; at --cosine-lr 1e30 no step improves on
    it, the lstsq map is kept, and the run says so (warning, summary.json, replace.csv) instead of passing for a
    cosine fit."""
    folder = model_dirs["qwen2"]
    maps, outputs = {}, {}
    for method, lr in (("lstsq", "1e-3"), ("cosine", "1e-3"), ("cosine-huge", "1e30")):
        out = tmp_path / method
        cosine = ["--cosine-steps", "50", "--cosine-lr", lr] if method.startswith("cosine") else []  # lstsq: refused
        result = invoke("heal", str(folder), "--remove", "2", "--method", method.split("-")[0], *cosine, *FIT,
                        "--out", str(out))
        assert result.exit_code == 0, result.output
        maps[method], outputs[method] = load_file(out / "transform.safetensors")["2"].numpy(), result.output
    summaries = {k: json.loads((tmp_path / k / "summary.json").read_text()) for k in maps}
    assert summaries["lstsq"]["cosine_kept_lstsq"] is None and summaries["cosine"]["cosine_kept_lstsq"] == []
    assert summaries["cosine-huge"]["cosine_kept_lstsq"] == ["2"]
    assert "lstsq map was kept" in outputs["cosine-huge"] and "lstsq map was kept" not in outputs["cosine"]
    assert any("lstsq map was kept" in w for w in summaries["cosine-huge"]["warnings"])
    kept = json.loads((tmp_path / "cosine-huge" / "merged" / "layerprobe-removal.json").read_text())["healing"]
    assert kept["cosine_kept_lstsq"] == ["2"]
    assert [str(v) for v in pd.read_csv(tmp_path / "cosine-huge" / "replace.csv")["cosine_kept_lstsq"]] == ["True"]
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    record: dict = {}
    for ids in calibration_batches(folder):
        hand_forward(full, ids, {(2, 2): None}, record)
    m, x, y = (np.concatenate([t[k].reshape(-1, 32).double().numpy() for t in record[2, 2]]) for k in range(3))
    lstsq, cosine = cosine_objective(maps["lstsq"], m, x, y), cosine_objective(maps["cosine"], m, x, y)
    assert cosine < lstsq  # 50 Adam steps from the lstsq map lower the cosine distance on the calibration tokens
    row = pd.read_csv(tmp_path / "cosine" / "replace.csv").iloc[0]
    assert row["cosine_fitted"] == pytest.approx(cosine, rel=1e-5) and row["cosine_lstsq"] == pytest.approx(lstsq, rel=1e-4)
    np.testing.assert_allclose(maps["cosine-huge"], naive_lstsq(record[2, 2]), rtol=1e-6, atol=1e-8)


def test_merged_folder_reloads_without_layerprobe(model_dirs, tmp_path):
    out = tmp_path / "run"
    result = invoke("heal", str(model_dirs["qwen2"]), "--remove", "1-2", "--method", "lstsq", *FIT, "--out", str(out))
    assert result.exit_code == 0, result.output
    facts = reload_without_layerprobe(out / "merged", [5, 6, 7, 8], tmp_path)
    maps = load_file(out / "transform.safetensors")
    full = transformers.AutoModelForCausalLM.from_pretrained(model_dirs["qwen2"]).eval()
    expected = hand_forward(full, torch.tensor([[5, 6, 7, 8]]), {(1, 2): maps["1-2"]}).flatten()
    assert facts["layers"] == facts["blocks"] == 2
    torch.testing.assert_close(torch.tensor(facts["logits"]), expected, atol=1e-4, rtol=1e-4)


def test_gain_is_off_by_default_for_replacement_and_on_with_the_flag(model_dirs, tmp_path):
    """The gain's timing (seconds of prefill and generate) is not run by default for lstsq; --gain records it, with
    the KV cache counted here by hand (4 and 3 blocks)."""
    from .test_heal import kv_bytes_by_hand

    folder, fit = model_dirs["llama"], [*DATA, "--calibration-tokens", str(CALIBRATION)]
    for flag, out in (([], tmp_path / "default"), (["--gain"], tmp_path / "gain")):
        result = invoke("heal", str(folder), "--remove", "2", "--method", "lstsq", *fit, *flag, "--out", str(out))
        assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "default" / "summary.json").read_text())["gain"] is None
    assert json.loads((tmp_path / "default" / "merged" / "layerprobe-removal.json").read_text())["gain"] is None
    gain = json.loads((tmp_path / "gain" / "summary.json").read_text())["gain"]
    assert gain["kv_cache_bytes_per_token_original"] == kv_bytes_by_hand(folder, 4)
    assert gain["kv_cache_bytes_per_token_exported"] == kv_bytes_by_hand(folder, 3)
    assert gain["decode_tokens_per_second_exported"] > 0  # measured, never asserted against a speed


def tiny_refused(kind: str, folder, tokenizer):
    """Tiny random models of the architectures a fold cannot be exact for, saved with the test tokenizer."""
    vocab, common = len(tokenizer), dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                         num_attention_heads=4, max_position_embeddings=128)
    if kind == "gemma3":
        config = transformers.Gemma3TextConfig(vocab_size=vocab, num_key_value_heads=2, head_dim=8, **common)
    else:
        config = transformers.Qwen2MoeConfig(vocab_size=vocab, num_key_value_heads=2, num_experts=4,
                                             num_experts_per_tok=2, moe_intermediate_size=16,
                                             shared_expert_intermediate_size=16, **common)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind,remove,needle", [
    ("llama", "0-1", "Block 0 is removed and has no block before it"),
    ("gemma3", "2", "Block 1 normalizes its MLP output (post_feedforward_layernorm) before the residual add"),
    ("bert", "2", "bert is Post-LN"),
    ("qwen2_moe", "2", "Block 1, before the removed blocks, is a mixture of experts"),
])
def test_inexact_folds_are_refused_in_one_line_writing_nothing(kind, remove, needle, model_dirs, tokenizer,
                                                                  tmp_path):
    folder = model_dirs.get(kind) or tiny_refused(kind, tmp_path / kind, tokenizer)
    out = tmp_path / "run"
    for method in ("lstsq", "cosine"):
        result = invoke("heal", str(folder), "--remove", remove, "--method", method, *FIT, "--out", str(out))
        assert_error(result, needle)
        assert not out.exists()


def test_tail_trains_only_the_head_and_last_blocks_as_a_hand_loop_does(model_dirs, tmp_path):
    from .test_heal import hand_data, hand_lr

    folder, out = model_dirs["llama"], tmp_path / "run"
    result = invoke("heal", str(folder), "--remove", "1", "--method", "tail", "--tail-blocks", "1", "--steps", "3",
                    "--lr", "1e-2", "--eval-every", "3", *DATA, "--no-gain", "--out", str(out))
    assert result.exit_code == 0, result.output
    _, train = hand_data(folder, 3)
    model = independent_pruned(folder, transformers.AutoModelForCausalLM, [1]).train()
    trained = [model.lm_head.weight, *model.model.layers[2].parameters()]  # kept blocks 0, 2, 3: the last one
    for p in model.parameters():
        p.requires_grad_(False)
    for p in trained:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(trained, lr=1e-2, weight_decay=0.0)
    losses = []
    for step in range(3):
        for group in optimizer.param_groups:
            group["lr"] = hand_lr(step, 3, 1e-2)
        optimizer.zero_grad()
        loss = model(input_ids=train[step], labels=train[step]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    assert pd.read_csv(out / "heal.csv")["loss"].iloc[1:].tolist() == pytest.approx(losses, rel=1e-5)
    merged = transformers.AutoModelForCausalLM.from_pretrained(out / "merged").state_dict()
    original = independent_pruned(folder, transformers.AutoModelForCausalLM, [1]).state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(merged[key], value, atol=1e-5, rtol=1e-4)
        moved = not torch.equal(merged[key], original[key])
        assert moved == (key.startswith(("lm_head", "model.layers.2.")))  # only the head and the last kept block
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "tail" and summary["tail_blocks"] == 1 and summary["adapter"] is None


def test_curve_healed_by_lstsq_equals_heal_and_refuses_block_zero_per_set(model_dirs, tmp_path):
    folder, out = model_dirs["llama"], tmp_path / "curve"
    args = ["prune", str(folder), "--task", "kl", "--curve", "--strategies", "last,bi", "--max-removed", "1",
            *DATA, "--heal", "lstsq", "--heal-calibration-tokens", str(CALIBRATION)]
    result = invoke(*args, "--out", str(out))
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(out / "curve.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heal"] == "lstsq" and summary["healed_baseline"] == pytest.approx(summary["baseline"])
    healed = invoke("heal", str(folder), "--remove", "3", "--method", "lstsq", *FIT, "--out", str(tmp_path / "h"))
    assert healed.exit_code == 0, healed.output
    after = json.loads((tmp_path / "h" / "summary.json").read_text())["heldout_after"]["kl"]
    assert curve.loc[curve["removed"].astype(str) == "3", "healed_score"].iloc[0] == pytest.approx(after, rel=1e-6)
    assert "0" in set(curve["removed"].astype(str))  # bi removes block 0 first on this model
    for removed in curve["removed"].astype(str):
        if removed.startswith("0"):  # bi picks block 0 on this model: no block before it, left unrepaired
            assert curve.loc[curve["removed"].astype(str) == removed, "healed_score"].isna().all()
            assert any(w.startswith(f"--heal left {removed} unrepaired: Block 0") for w in summary["warnings"])
    # the healed sets' records (per held-out sequence) reproduce healed_score, and the paired intervals are the
    # hand ones (every sequence has the same positions, so kl is a mean of per-sequence means): from the unpruned
    # model healed alike (kl 0 on every sequence) the t interval of the healed kl on the log scale, kl >= 0; from
    # the unhealed set (inside the range) the expanded percentile bootstrap (seed 0, 2,000 paired resamples, the
    # k-th draw from either side, k from the t quantile with n - 1 degrees of freedom)
    records = pd.read_csv(out / "samples.csv.gz", dtype={"removed": str})
    by = {label: rows.sort_values("doc_id") for label, rows in records.groupby("removed")}
    assert (by["unpruned healed"]["total"] == 0).all()  # a replacement leaves the unpruned model as it is
    for row in curve[curve["healed_score"].notna()].itertuples():
        mine, unhealed = by[f"{row.removed} healed"], by[str(row.removed)]
        assert mine["tokens"].nunique() == 1 and mine["doc_id"].tolist() == unhealed["doc_id"].tolist()
        assert mine["total"].sum() / mine["tokens"].sum() == pytest.approx(row.healed_score, rel=1e-9)
        healed, was = mine["total"].to_numpy() / mine["tokens"].to_numpy(), unhealed["total"].to_numpy()
        n, q = len(healed), stats.t.ppf(0.975, len(healed) - 1)
        spread = q * healed.std(ddof=1) / np.sqrt(n) / healed.mean()  # on log(kl): the delta method's slope 1/kl
        assert [row.healed_delta, row.healed_delta_lo, row.healed_delta_hi] == pytest.approx(
            [healed.mean(), healed.mean() * np.exp(-spread), healed.mean() * np.exp(spread)], rel=1e-9, abs=1e-12)
        draw, tokens, draws = np.random.default_rng(0), mine["tokens"].to_numpy(), []
        for _ in range(2000):
            pick = draw.integers(0, n, size=n)
            draws.append((mine["total"].to_numpy()[pick].sum() - was[pick].sum()) / tokens[pick].sum())
        k = int(np.floor(2000 * stats.norm.sf(np.sqrt(n / (n - 1)) * q) + 1e-9))
        ends = sorted(draws)[k - 1], sorted(draws)[-k]
        assert [row.heal_change, row.heal_change_lo, row.heal_change_hi] == pytest.approx(
            [healed.mean() - (was / tokens).mean(), *ends], rel=1e-9, abs=1e-12)
    assert curve.loc[curve["healed_score"].isna(), ["healed_delta", "heal_change_lo"]].isna().all().all()
    # report states them; compare reads a healed curve (its records hold the healed sets too) against itself
    report = invoke("report", str(out), "--out", str(tmp_path / "report"))
    assert report.exit_code == 0, report.output
    # 8 probe sequences (256 tokens of 32), fewer than the 10 a test needs: the intervals stay in curve.csv, the
    # report states no verdict from them
    assert "too few sequences to test these changes" in (tmp_path / "report" / "report.md").read_text()
    same = invoke("compare", str(out), str(out))
    assert same.exit_code == 0, same.output


@pytest.mark.parametrize("args,needle", [
    (["--heal", "lstsq", "--heal-steps", "5"], "--heal lstsq trains nothing, so --heal-steps 5 has no use"),
    (["--heal", "tail"], "--heal tail trains: pass --heal-steps N"),
])
def test_bad_curve_heal_input(args, needle, model_dirs, tmp_path):
    result = invoke("prune", str(model_dirs["llama"]), "--task", "kl", "--curve", "--strategies", "last",
                    "--max-removed", "1", *DATA, *args, "--out", str(tmp_path / "x"))
    assert_error(result, needle)


def test_heldout_change_intervals_match_a_hand_bootstrap_and_scipy_and_paths_are_the_run_folders(model_dirs, tmp_path,
                                                                                                  monkeypatch):
    """16 held-out sequences (tested): the kl change's paired interval and p are scipy's paired t on the per-sequence
    mean KL (equal positions per sequence make the ratio's influence the paired difference), the ppl change's
    standard error a naive bootstrap's (another generator); the run is started from another working directory and
    records transform, merged and the healing record's transform relative to the run folder (issue 49 item 10)."""
    from .helpers import reference_sequences

    folder, out = model_dirs["llama"], tmp_path / "elsewhere" / "run"
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    data = ["--dataset", "builtin", "--tokens", "512", "--seq-len", "32", "--batch-size", "4"]
    result = invoke("heal", str(folder), "--remove", "1-2", "--method", "lstsq", *data, "--calibration-tokens",
                    str(CALIBRATION), "--no-gain", "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    record = json.loads((out / "merged" / "layerprobe-removal.json").read_text())
    assert summary["transform"] == record["healing"]["transform"] == "transform.safetensors"
    assert summary["merged"] == "merged" and summary["merged_bytes"] > 0
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    removed = independent_pruned(folder, transformers.AutoModelForCausalLM, [1, 2])
    repaired = transformers.AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    change = summary["heldout_change"]
    assert change["sequences"] == 16 and change["tested"] is True
    before, after = (np.array(reference_sequences("kl", full, m, folder, 512, 32, 4)) for m in (removed, repaired))
    assert len(set(before[:, 1])) == 1  # every sequence the same positions
    d = after[:, 0] / after[:, 1] - before[:, 0] / before[:, 1]
    # the paired bootstrap by hand: 2,000 resamples of the 16 sequences drawn one by one from default_rng(0), the
    # expanded percentile interval (Hesterberg 2015) the k-th change from either side, k by scipy
    draw = np.random.default_rng(0)
    picks = [[int(draw.integers(0, 16)) for _ in range(16)] for _ in range(2000)]
    ratio = lambda rows, pick: sum(rows[i, 0] for i in pick) / sum(rows[i, 1] for i in pick)  # noqa: E731
    k = math.floor(2000 * stats.norm.sf(math.sqrt(16 / 15) * stats.t.ppf(0.975, 15)))
    kl_draws = sorted(ratio(after, pick) - ratio(before, pick) for pick in picks)
    kl = change["kl"]  # layerprobe's kl is float32 (a change of 6e-5 between kls of 1e-3: float noise ~1e-7)
    assert kl["change"] == pytest.approx(d.mean(), abs=3e-7)
    assert (kl["lo"], kl["hi"]) == pytest.approx((kl_draws[k - 1], kl_draws[-k]), abs=3e-7)
    assert kl["stderr"] == pytest.approx(np.std(kl_draws, ddof=1), rel=0.02)
    assert kl["p"] == pytest.approx(stats.ttest_rel(after[:, 0] / after[:, 1], before[:, 0] / before[:, 1]).pvalue,
                                    rel=0.05, abs=1e-12)
    assert kl["lo"] > -before[:, 0].sum() / before[:, 1].sum()  # never a kl below 0
    nll_before, nll_after = (np.array(reference_sequences("ppl", full, m, folder, 512, 32, 4)) for m in (removed,
                                                                                                         repaired))
    ppl = change["ppl"]
    exp_ratio = lambda rows: np.exp(rows[..., 0].sum(-1) / rows[..., 1].sum(-1))  # noqa: E731
    assert ppl["change"] == pytest.approx(exp_ratio(nll_after) - exp_ratio(nll_before), rel=1e-4)
    draws = np.random.RandomState(12345).randint(0, 16, size=(4000, 16))
    naive = exp_ratio(nll_after[draws]) - exp_ratio(nll_before[draws])
    assert ppl["stderr"] == pytest.approx(naive.std(ddof=1), rel=0.1)
    assert ppl["lo"] < ppl["change"] < ppl["hi"]
    ppl_draws = sorted(float(np.exp(ratio(nll_after, pick)) - np.exp(ratio(nll_before, pick))) for pick in picks)
    level = float(exp_ratio(nll_before))  # float32 ppls: the ends are differences of two, each good to ~1e-4 of it
    assert (ppl["lo"], ppl["hi"]) == pytest.approx((ppl_draws[k - 1], ppl_draws[-k]), abs=1e-4 * level)
    mean_nll = lambda rows: rows[:, 0] / rows[:, 1]  # noqa: E731  two ppls are equal exactly when these are
    assert ppl["p"] == pytest.approx(stats.ttest_rel(mean_nll(nll_after), mean_nll(nll_before)).pvalue, rel=0.05,
                                     abs=1e-12)
    table = pd.read_csv(out / "heal.csv")
    assert table["kl_change_lo"].iloc[1] == pytest.approx(kl["lo"]) and table["kl_change_lo"].isna().iloc[0]
    assert table["ppl_change_hi"].iloc[1] == pytest.approx(ppl["hi"])
