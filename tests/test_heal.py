"""Healing after removal (`layerprobe heal`), greedy as SLEB runs it, and the gain measured as users serve models:
each against an independent reference (a hand-written peft loop, peft's own merge, a hand count from the config)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import transformers

from .helpers import assert_error, independent_pruned, invoke, reference_metric, reload_without_layerprobe

DATA = ["--dataset", "builtin", "--tokens", "256", "--seq-len", "32", "--batch-size", "4"]


def test_greedy_keeps_the_first_and_last_block_unless_allowed(model_dirs, tmp_path):
    folder, cls = model_dirs["llama"], transformers.AutoModelForCausalLM
    picks = {}
    for ends in ("allow", "keep"):
        out = tmp_path / ends
        result = invoke("prune", str(folder), "--task", "kl", "--curve", "--strategies", "greedy",
                        "--max-removed", "2", *DATA, "--greedy-ends", ends, "--out", str(out))
        assert result.exit_code == 0, result.output
        picks[ends] = [int(v) for v in pd.read_csv(out / "curve.csv")["removed"].iloc[0].split(",")]
        assert __import__("json").loads((out / "summary.json").read_text())["greedy_ends"] == ends
    assert picks["allow"][0] in (0, 3)  # on this model the old rule removes an end block first
    full = cls.from_pretrained(folder).eval()
    values = {c: reference_metric("kl", full, independent_pruned(folder, cls, [c]), folder, 256, 32, 4) for c in (1, 2)}
    assert picks["keep"] == [min(values, key=values.get)]  # the best of the inner blocks, by a hand-written kl
    refused = invoke("prune", str(folder), "--task", "kl", "--curve", "--strategies", "greedy",
                     "--max-removed", "3", *DATA, "--out", str(tmp_path / "x"))
    assert_error(refused, "--greedy-ends keep never removes the first or the last")


def kv_bytes_by_hand(folder, layers: int) -> int:
    """2 (keys and values) x layers x kv heads x head dim x bytes per value, from config.json alone."""
    config = __import__("json").loads((folder / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * layers * config["num_key_value_heads"] * head_dim * 4  # float32


def test_export_gain_counts_the_kv_cache_and_says_attn_gains_nothing(model_dirs, tmp_path):
    import json

    folder = model_dirs["llama"]
    from layerprobe import ExportConfig, ModelOptions, export

    gains = {}
    for part in ("block", "attn"):
        out = tmp_path / part
        export(ExportConfig(model=ModelOptions(str(folder), device="cpu"), remove="1", part=part, out=str(out),
                            timing_repeats=2, timing_new_tokens=4, timing_seq_len=16))
        gains[part] = json.loads((out / "layerprobe-removal.json").read_text())["gain"]
    block, attn = gains["block"], gains["attn"]
    assert block["kv_cache_bytes_per_token_original"] == kv_bytes_by_hand(folder, 4)
    assert block["kv_cache_bytes_per_token_exported"] == kv_bytes_by_hand(folder, 3)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert block["weights_bytes_original"] == sum(p.numel() * 4 for p in full.parameters())
    assert block["weights_bytes_exported"] == sum(p.numel() * 4 for n, p in full.named_parameters()
                                                  if not n.startswith("model.layers.1."))
    for key in ("decode_tokens_per_second_original", "decode_tokens_per_second_exported"):
        assert block[key] > 0  # measured, never asserted against a speed
    assert block["decode_batch"] == 1 and block["decode_new_tokens"] == 4 and block["timing_repeats"] == 2
    # --part attn zeroes a projection: the same weights, the same cache, nothing gained
    assert attn["parameter_ratio"] == 1.0 and attn["weights_ratio"] == 1.0 and attn["kv_cache_ratio"] == 1.0


# ---- heal -----------------------------------------------------------------------------------------------------

HEAL = ["--remove", "1", "--dataset", "builtin", "--tokens", "256", "--seq-len", "32", "--batch-size", "4",
        "--steps", "8", "--lr", "1e-2", "--lora-rank", "4", "--eval-every", "4", "--no-gain"]


@pytest.fixture(scope="module")
def healed(model_dirs, tmp_path_factory):
    """One lm healing of the tiny LLaMA without block 1, read by several tests."""
    out = tmp_path_factory.mktemp("heal") / "run"
    result = invoke("heal", str(model_dirs["llama"]), *HEAL, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def hand_data(folder, steps: int, batch_size: int = 4, seq_len: int = 32, heldout_tokens: int = 256):
    """The held-out batches (the first tokens, as prune reads them) and the training batches after them, packed
    here from the documented rule."""
    import torch

    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import batches, packed_sequences

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    heldout = list(batches(open_corpus("builtin").texts(), tok, seq_len, batch_size, heldout_tokens))
    skip = sum(b.input_ids.shape[0] for b in heldout)
    rows = list(packed_sequences(open_corpus("builtin").texts(), tok, seq_len,
                                 (skip + steps * batch_size) * seq_len))[skip:]
    rows = [r for r in rows if len(r) == seq_len]
    return heldout, torch.tensor(rows[: len(rows) // batch_size * batch_size]).view(-1, batch_size, seq_len)


def hand_lr(step: int, steps: int, lr: float) -> float:
    """Linear warmup over 10% of the steps, then cosine from lr to lr/10 (step is 0-based)."""
    import math

    warmup = steps // 10
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup)))))


def hand_peft_loop(folder, drop, steps=8, lr=1e-2, rank=4):
    """A plain peft training loop on an independently shortened copy: same seed, data order and settings."""
    import torch
    from peft import LoraConfig, get_peft_model

    _, train = hand_data(folder, steps)
    model = independent_pruned(folder, transformers.AutoModelForCausalLM, drop)
    targets = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    torch.manual_seed(0)
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=16.0, lora_dropout=0.0, target_modules=targets))
    params = [p for p in peft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    peft.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = hand_lr(step, steps, lr)
        ids = train[step % len(train)]
        optimizer.zero_grad()
        loss = peft(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    return peft.eval(), losses


def test_healing_lowers_heldout_loss_as_a_hand_written_peft_loop_does(healed, model_dirs):
    import json

    import torch
    from safetensors.torch import load_file

    folder = model_dirs["llama"]
    table = pd.read_csv(healed / "heal.csv")
    assert list(table.columns)[:5] == ["step", "loss", "lr", "heldout_ppl", "heldout_kl"]  # the contract's, first
    assert list(table["step"]) == list(range(9)) and table["heldout_ppl"].notna().tolist() == [
        True, False, False, False, True, False, False, False, True]
    summary = json.loads((healed / "summary.json").read_text())
    assert summary["heldout_after"]["ppl"] < summary["heldout_before"]["ppl"]  # healing is real
    peft, losses = hand_peft_loop(folder, [1])
    assert table["loss"].iloc[1:].tolist() == pytest.approx(losses, rel=1e-5)
    assert table["lr"].iloc[1:].tolist() == pytest.approx([hand_lr(s, 8, 1e-2) for s in range(8)], rel=1e-12)
    saved = load_file(healed / "adapter" / "adapter_model.safetensors")
    from peft import get_peft_model_state_dict

    mine = get_peft_model_state_dict(peft)
    assert sorted(saved) == sorted(mine)
    for key, value in mine.items():
        torch.testing.assert_close(saved[key], value, atol=1e-5, rtol=1e-4)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    merged = peft.merge_and_unload()
    assert summary["heldout_after"]["ppl"] == pytest.approx(
        reference_metric("ppl", full, merged, folder, 256, 32, 4), rel=1e-5)
    assert summary["heldout_after"]["kl"] == pytest.approx(
        reference_metric("kl", full, merged, folder, 256, 32, 4), rel=1e-4, abs=1e-7)
    assert summary["heldout_unpruned_ppl"] == pytest.approx(
        reference_metric("ppl", full, full, folder, 256, 32, 4), rel=1e-5)


def test_merged_checkpoint_is_peft_merge_and_reloads_without_layerprobe(healed, model_dirs, tmp_path):
    import json

    import torch
    from peft import PeftModel

    folder = model_dirs["llama"]
    base = independent_pruned(folder, transformers.AutoModelForCausalLM, [1])
    want = PeftModel.from_pretrained(base, healed / "adapter").merge_and_unload().state_dict()
    merged = transformers.AutoModelForCausalLM.from_pretrained(healed / "merged").eval()
    got = merged.state_dict()
    assert sorted(got) == sorted(want)
    assert max(float((got[k] - want[k]).abs().max()) for k in want) <= 1e-6
    record = json.loads((healed / "merged" / "layerprobe-removal.json").read_text())
    assert record["removed"] == [1] and record["kept"] == [0, 2, 3] and record["healing"]["steps"] == 8
    facts = reload_without_layerprobe(healed / "merged", [5, 6, 7, 8], tmp_path)
    with torch.no_grad():
        expected = merged(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.flatten()
    assert facts["layers"] == 3
    torch.testing.assert_close(torch.tensor(facts["logits"]), expected, atol=1e-5, rtol=1e-5)


def test_distill_starts_at_prunes_kl_and_lowers_it(model_dirs, tmp_path):
    import json

    import torch

    folder = model_dirs["llama"]
    out = tmp_path / "distill"
    args = [{"8": "4", "1e-2": "1e-3"}.get(a, a) for a in HEAL]
    result = invoke("heal", str(folder), *args, "--objective", "distill", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "heal.csv")
    prune = invoke("prune", str(folder), "--task", "kl", "--layers", "1", *DATA, "--out",
                   str(tmp_path / "kl"))
    assert prune.exit_code == 0, prune.output
    kl = pd.read_csv(tmp_path / "kl" / "prune.csv")["pruned"].iloc[0]
    assert table["heldout_kl"].iloc[0] == pytest.approx(kl, rel=1e-5)
    # the first step's loss: KL(unpruned || shortened) on the first training batch, by hand in float64
    _, train = hand_data(folder, 4)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    short = independent_pruned(folder, transformers.AutoModelForCausalLM, [1])
    with torch.no_grad():
        p = full(input_ids=train[0]).logits.double().log_softmax(-1)
        q = short(input_ids=train[0]).logits.double().log_softmax(-1)
    assert table["loss"].iloc[1] == pytest.approx(float((p.exp() * (p - q)).sum(-1).mean()), rel=1e-4)  # float32
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout_after"]["kl"] < summary["heldout_before"]["kl"] and summary["objective"] == "distill"


KILLER = """
import os, signal, sys
from layerprobe import HealConfig, ModelOptions, DataOptions, heal
from layerprobe.repair.loop import STEPS_STAGE
def progress(stage, done, total):
    if stage == STEPS_STAGE and done == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # after the save at step 4: step 5 is lost
heal(HealConfig(model=ModelOptions(sys.argv[1]), data=DataOptions("builtin", tokens=256, seq_len=32, batch_size=4),
                remove="1", steps=8, lr=1e-2, lora_rank=4, eval_every=4, save_every=4, gain=False, out=sys.argv[2]),
     progress)
"""


def test_kill_then_resume_equals_an_uninterrupted_run(healed, model_dirs, tmp_path):
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", KILLER, str(model_dirs["llama"]), str(out)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == -9, done.stderr
    assert (out / "pass.safetensors").is_file() and not (out / "summary.json").exists()
    assert len(pd.read_csv(out / "heal.csv")) == 5  # steps 0..4, saved with the state
    result = invoke("heal", str(model_dirs["llama"]), *HEAL, "--out", str(out), "--resume")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_csv(out / "heal.csv"), pd.read_csv(healed / "heal.csv"))
    a, b = load_file(out / "adapter" / "adapter_model.safetensors"), load_file(healed / "adapter" / "adapter_model.safetensors")
    assert sorted(a) == sorted(b) and all(bool((a[k] == b[k]).all()) for k in a)
    assert not (out / "pass.safetensors").exists()


def test_heal_an_exported_folder_and_report_it(model_dirs, tmp_path):
    import json

    exported, out = tmp_path / "exported", tmp_path / "healed"
    from layerprobe import ExportConfig, ModelOptions, export

    export(ExportConfig(model=ModelOptions(str(model_dirs["llama"])), remove="2", out=str(exported), verify=False,
                        timing_repeats=1, timing_new_tokens=1, timing_seq_len=8))
    args = [a for a in HEAL if a not in ("--remove", "1")]
    result = invoke("heal", str(exported), *[{"8": "2"}.get(a, a) for a in args], "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["removed_layers"] == [2] and summary["exported_from"] == str(exported)
    assert summary["num_layers"] == 4 and summary["num_layers_healed"] == 3  # healed from the export's source
    report = invoke("report", str(out), "--out", str(tmp_path))
    assert report.exit_code == 0, report.output
    assert "Healing the model without 2 (lm, 2 steps" in (tmp_path / "report.md").read_text()


def test_healed_curve_equals_heal_and_resumes_per_set(model_dirs, tmp_path):
    import json

    from layerprobe.commands.prune import curve as module

    folder = model_dirs["llama"]
    args = ["prune", str(folder), "--task", "ppl", "--curve", "--strategies", "last", "--max-removed", "2", *DATA,
            "--heal-steps", "3", "--heal-lr", "1e-2"]
    whole = invoke(*args, "--out", str(tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output
    curve = pd.read_csv(tmp_path / "whole" / "curve.csv")
    assert curve["healed_score"].notna().all() and (curve["healed_score"] < curve["score"]).all()
    # the healed score of removing block 3 (last, k=1) is layerprobe heal's held-out ppl after the same healing
    healed = invoke("heal", "--from-curve", str(tmp_path / "whole"), "--strategy", "last", "--k", "1",
                    *DATA, "--steps", "3", "--lr", "1e-2", "--eval-every", "3", "--no-gain", "--out",
                    str(tmp_path / "heal"))
    assert healed.exit_code == 0, healed.output
    summary = json.loads((tmp_path / "heal" / "summary.json").read_text())
    assert summary["removed_layers"] == [3] and summary["model"] == str(folder)
    after = summary["heldout_after"]["ppl"]
    assert curve.loc[curve["removed"] == "3", "healed_score"].iloc[0] == pytest.approx(after, rel=1e-9)
    # the fair reference: the unpruned model healed alike also adapts to the corpus (below its unhealed ppl)
    reference = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert reference["baseline"] == pytest.approx(summary["heldout_unpruned_ppl"], rel=1e-9)  # same held-out text
    assert reference["healed_baseline"] < reference["baseline"]
    # interrupted after the first healed set, then resumed: the same curve
    original = module.heal_sets

    def interrupted(config, probe, variants, ledger, progress):
        def stop(stage, done, total):
            if stage == "healed sets" and done == 1:
                raise KeyboardInterrupt
        return original(config, probe, variants, ledger, stop)

    module.heal_sets = interrupted
    try:
        invoke(*args, "--out", str(tmp_path / "cut"))
    finally:
        module.heal_sets = original
    assert len(json.loads((tmp_path / "cut" / "state.json").read_text())["healed"]) == 1
    resumed = invoke(*args, "--out", str(tmp_path / "cut"), "--resume")
    assert resumed.exit_code == 0, resumed.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "cut" / "curve.csv"), curve)
    # each healed set's per-sequence records give its healed ppl (exp of the summed NLL over the positions), and
    # the resumed run keeps the first set's records exactly
    records = {name: pd.read_csv(tmp_path / name / "samples.csv.gz", dtype={"removed": str})
               for name in ("whole", "cut")}
    pd.testing.assert_frame_equal(records["cut"], records["whole"])
    for row in curve.itertuples():
        mine = records["whole"][records["whole"]["removed"] == f"{row.removed} healed"]
        assert np.exp(mine["total"].sum() / mine["tokens"].sum()) == pytest.approx(row.healed_score, rel=1e-9)
        assert row.heal_change == pytest.approx(row.healed_score - row.score, rel=1e-9)
        assert row.heal_change_lo < row.heal_change < row.heal_change_hi and row.healed_delta == pytest.approx(
            row.healed_score - reference["healed_baseline"], rel=1e-9)


@pytest.mark.parametrize("args,needle", [
    (["--remove", "1", "--steps", "0"], "--steps must be positive, got 0"),
    (["--remove", "0-3"], "Cannot remove all 4 layers"),
    (["--remove", "1", "--lora-targets", "qproj"], "Unknown --lora-targets 'qproj'"),
    (["--remove", "1", "--objective", "sft"], "Unknown --objective 'sft'"),
    ([], "is a model folder, not an export (it holds no layerprobe-removal.json): pass --remove 20-27"),
])
def test_bad_heal_input(args, needle, model_dirs, tmp_path):
    result = invoke("heal", str(model_dirs["llama"]), *DATA, *args, "--out", str(tmp_path / "x"))
    assert_error(result, needle)


def test_too_few_heldout_sequences_keep_their_intervals_untested(healed):
    """8 held-out sequences (below MIN_DOCUMENTS): heal.csv and summary.json keep the paired intervals of the change,
    no p-value, and the report says too few documents to test."""
    import json

    from layerprobe.commands.heal.read import heal_findings
    from layerprobe.runs.read import load_run

    change = json.loads((healed / "summary.json").read_text())["heldout_change"]
    assert change["sequences"] == 8 and change["tested"] is False
    assert change["kl"]["p"] is None and change["kl"]["lo"] < change["kl"]["change"] < change["kl"]["hi"]
    table = pd.read_csv(healed / "heal.csv")
    scored = table.dropna(subset=["heldout_ppl"])
    assert scored["kl_change_lo"].isna().tolist() == [True, False, False]  # step 0 has no change
    assert scored["kl_change_hi"].iloc[-1] == pytest.approx(change["kl"]["hi"])
    text = " ".join(heal_findings(load_run(healed)))
    assert "paired 95% intervals over the 8 held-out sequences" in text and "too few documents to test" in text


def test_no_merged_writes_no_checkpoint_and_readers_refuse_it(model_dirs, tmp_path):
    """--no-merged: no merged/, the summary and the report say so, and a command given the run (or its missing
    merged/) as MODEL refuses it in one line."""
    import json

    out = tmp_path / "run"
    result = invoke("heal", str(model_dirs["llama"]), *HEAL[:10], "--steps", "2", "--eval-every", "2",
                    "--lora-rank", "4", "--no-gain", "--no-merged", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "no merged checkpoint (--no-merged)" in " ".join(result.output.split())
    assert not (out / "merged").exists() and (out / "adapter").is_dir()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["merged"] is None and summary["merged_bytes"] is None
    assert summary["verified_max_difference"] is None
    report = invoke("report", str(out), "--out", str(tmp_path / "report"))
    assert report.exit_code == 0, report.output
    assert "No merged/ checkpoint was written (--no-merged)" in (tmp_path / "report" / "report.md").read_text()
    for model in (out, out / "merged"):
        assert_error(invoke("export", str(model), "--remove", "1", "--out", str(tmp_path / "x")), "--no-merged")
        assert_error(invoke("angular", str(model), "--dataset", "builtin", "--tokens", "64", "--out",
                            str(tmp_path / "y")), "--no-merged")


def test_lora_on_opt_adapts_the_block_s_own_fc1_fc2(tokenizer):
    """OPT keeps its MLP's fc1 and fc2 on the decoder layer itself (no mlp module): LoRA's targets are every
    attention and MLP projection all the same, named here from the model's own module list, not layerprobe's."""
    import torch
    import transformers

    from layerprobe.models.layers import find_blocks
    from layerprobe.models.lora import lora_targets

    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=len(tokenizer), hidden_size=32, ffn_dim=64, num_hidden_layers=3,
                                    num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=64)
    model = transformers.OPTForCausalLM(config)
    by_hand = sorted(name for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and ".layers." in name)
    assert any(name.endswith(".fc2") for name in by_hand)
    assert sorted(lora_targets(model, find_blocks(model), ())) == by_hand
