"""`prune --shard K/N` + `layerprobe merge`: shards joined equal one unsharded sweep and hand-computed scores."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import transformers

from layerprobe.evaluation.variants import Variant, shard_of

from .helpers import assert_error, reference_metric
from .helpers import invoke as cli
from .helpers import independent_pruned


def invoke(*args):
    result = cli(*args)
    return result, " ".join(result.output.split())


def prune(folder, *args):
    return invoke("prune", folder, "--task", "ppl", "--dataset", "builtin", "--tokens", 256, "--seq-len", 32,
                  "--batch-size", 4, "--device", "cpu", *args)


def test_shards_are_disjoint_and_cover_the_sweep():
    variants = [Variant(i) for i in range(7)]
    parts = [shard_of(variants, k, 3) for k in (1, 2, 3)]
    assert [[v.start for v in p] for p in parts] == [[0, 3, 6], [1, 4], [2, 5]]


def test_merged_shards_equal_the_unsharded_sweep(model_dirs, tmp_path):
    folder = model_dirs["llama"]
    result, _ = prune(folder, "--out", tmp_path / "whole")
    assert result.exit_code == 0, result.output
    for k in (1, 2, 3):  # 4 layers in 3 shards: 2 + 1 + 1 variants, each shard computes its own baseline
        result, _ = prune(folder, "--shard", f"{k}/3", "--out", tmp_path / f"prune-ppl-shard-{k}-of-3")
        assert result.exit_code == 0, result.output
    shard = json.loads((tmp_path / "prune-ppl-shard-2-of-3" / "summary.json").read_text())["shard"]
    assert shard == {"index": 2, "count": 3, "sweep_variants": 4, "variants": ["1"]}
    shards = [tmp_path / f"prune-ppl-shard-{k}-of-3" for k in (3, 1, 2)]  # any order
    result, text = invoke("merge", *shards)
    assert result.exit_code == 0, result.output
    merged = tmp_path / "prune-ppl"  # the shards' name without the suffix
    assert "least important" in text and str(merged) in "".join(text.split())  # a long path may wrap
    assert (merged / "prune.csv").read_text() == (tmp_path / "whole" / "prune.csv").read_text()
    a = json.loads((merged / "summary.json").read_text())
    b = json.loads((tmp_path / "whole" / "summary.json").read_text())
    for key in ("seconds", "warnings"):
        a.pop(key), b.pop(key)
    assert a == b
    manifest = json.loads((merged / "manifest.json").read_text())
    assert manifest["shards"] == 3 and len(manifest["merged_from"]) == 3 and manifest["config"]["shard"] is None
    assert (merged / "prune.png").is_file()
    # and against an independent computation: each row's perplexity from a separately built shorter model
    table = pd.read_csv(merged / "prune.csv")
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    for row in table.itertuples():
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, [row.layer])
        assert row.pruned == pytest.approx(reference_metric("ppl", full, pruned, folder, 256, 32, 4), rel=1e-5)


def test_merge_refuses_shards_of_different_sweeps(model_dirs, tmp_path):
    a, b, c, d = (tmp_path / n for n in "abcd")
    assert prune(model_dirs["llama"], "--shard", "1/2", "--out", a)[0].exit_code == 0
    assert prune(model_dirs["llama"], "--shard", "2/2", "--out", b, "--tokens", 128)[0].exit_code == 0
    assert prune(model_dirs["qwen2"], "--shard", "2/2", "--out", c)[0].exit_code == 0
    assert prune(model_dirs["llama"], "--out", d, "--layers", "0")[0].exit_code == 0
    cases = {
        (a, b): "disagree on data.tokens",
        (a, c): "disagree on model.model",
        (a, a): "given twice",
        (a,): "Shard 2/2 missing: run `layerprobe prune ... --shard 2/2`",
        (a, d): "is not a shard",
        (a, tmp_path / "nope"): "does not exist",
    }
    for folders, needle in cases.items():
        result, text = invoke("merge", *folders, "--out", tmp_path / "merged")
        assert_error(result, needle)
    assert not (tmp_path / "merged").exists()  # nothing written half


def test_merge_refuses_a_different_baseline(model_dirs, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert prune(model_dirs["llama"], "--shard", "1/2", "--out", a)[0].exit_code == 0
    assert prune(model_dirs["llama"], "--shard", "2/2", "--out", b)[0].exit_code == 0
    table = pd.read_csv(b / "prune.csv")
    table["baseline"] += 0.5  # e.g. another checkpoint under the same path
    table.to_csv(b / "prune.csv", index=False)
    result, text = invoke("merge", a, b)
    assert result.exit_code == 2 and "baseline ppl" in text and "not evaluate the same model" in text


@pytest.mark.parametrize("shard,needle", [("3/2", "K must lie within 1..N"), ("x", "use K/N"),
                                          ("1/9", "only 4 variants")])
def test_bad_shard(shard, needle, model_dirs, tmp_path):
    result, text = prune(model_dirs["llama"], "--shard", shard, "--out", tmp_path / "x")
    assert_error(result, needle)
