"""Healing after removal (`layerprobe heal`), greedy as SLEB runs it, and the gain measured as users serve models:
each against an independent reference (a hand-written peft loop, peft's own merge, a hand count from the config)."""

from __future__ import annotations

import pandas as pd
import pytest
import transformers
from typer.testing import CliRunner

from layerprobe.cli import app

from .helpers import assert_error, independent_pruned, reference_metric

runner = CliRunner()
DATA = ["--dataset", "builtin", "--tokens", "256", "--seq-len", "32", "--batch-size", "4"]


def test_greedy_keeps_the_first_and_last_block_unless_allowed(model_dirs, tmp_path):
    folder, cls = model_dirs["llama"], transformers.AutoModelForCausalLM
    picks = {}
    for ends in ("allow", "keep"):
        out = tmp_path / ends
        result = runner.invoke(app, ["prune", str(folder), "--task", "kl", "--curve", "--strategies", "greedy",
                                     "--max-removed", "2", *DATA, "--greedy-ends", ends, "--out", str(out)])
        assert result.exit_code == 0, result.output
        picks[ends] = [int(v) for v in pd.read_csv(out / "curve.csv")["removed"].iloc[0].split(",")]
        assert __import__("json").loads((out / "summary.json").read_text())["greedy_ends"] == ends
    assert picks["allow"][0] in (0, 3)  # on this model the old rule removes an end block first
    full = cls.from_pretrained(folder).eval()
    values = {c: reference_metric("kl", full, independent_pruned(folder, cls, [c]), folder, 256, 32, 4) for c in (1, 2)}
    assert picks["keep"] == [min(values, key=values.get)]  # the best of the inner blocks, by a hand-written kl
    refused = runner.invoke(app, ["prune", str(folder), "--task", "kl", "--curve", "--strategies", "greedy",
                                  "--max-removed", "3", *DATA, "--out", str(tmp_path / "x")])
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
