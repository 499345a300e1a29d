"""prune --curve: every strategy's layer sets against a hand computation (the angular CSV, a naive greedy loop over
independently shortened copies), every score against an independently pruned copy scored by hand or by lm-eval."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import transformers

from .helpers import assert_error, independent_pruned, invoke, reference_metric
from .test_prune_lmeval import hand_accuracy, task_dir  # noqa: F401  (a fixture)

DATA = ["--dataset", "builtin", "--tokens", "256", "--seq-len", "32", "--batch-size", "4"]


def ids(label: str) -> list[int]:
    """'1,3-4' -> [1, 3, 4], written here from the README's convention (0-based, ranges inclusive)."""
    out = []
    for part in str(label).split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def test_llama_kl_curve_against_hand_selection_and_independent_scores(model_dirs, tmp_path):
    folder, out = model_dirs["llama"], tmp_path / "curve"
    result = invoke("prune", str(folder), "--task", "kl", "--curve", "--max-removed", "3", *DATA,
                    "--greedy-ends", "allow", "--out", str(out))
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(out / "curve.csv")
    assert list(curve.columns[:8]) == ["strategy", "k", "fraction", "removed", "metric", "baseline", "score", "delta"]
    assert sorted(set(curve["strategy"])) == ["angular", "bi", "greedy", "last"] and set(curve["k"]) == {1, 2, 3}
    chosen = {(r.strategy, r.k): ids(r.removed) for r in curve.itertuples()}
    # angular and bi, from the angular run measured first on the same corpus
    angular = pd.read_csv(out / "angular" / "angular.csv")
    layers = pd.read_csv(out / "angular" / "layers.csv")
    for k in (1, 2, 3):
        distance = {int(r.layer): r.distance for r in angular.itertuples() if r.n == k}
        start = min(distance, key=lambda layer: (distance[layer], layer))
        assert chosen[("angular", k)] == list(range(start, start + k))
        influence = layers["block_influence"][:4].tolist()
        assert chosen[("bi", k)] == sorted(sorted(range(4), key=lambda layer: influence[layer])[:k])
        assert chosen[("last", k)] == list(range(4 - k, 4))
    # greedy: the naive loop, each candidate an independently shortened copy scored by hand-written kl
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    cls = transformers.AutoModelForCausalLM
    scored: dict[tuple[int, ...], float] = {}  # a layer set the greedy loop and the curve both score: scored once

    def hand_kl(drop: list[int]) -> float:
        key = tuple(sorted(drop))
        if key not in scored:
            scored[key] = reference_metric("kl", full, independent_pruned(folder, cls, list(key)), folder, 256, 32, 4)
        return scored[key]

    greedy: list[int] = []
    for k in (1, 2, 3):
        values = {c: hand_kl(greedy + [c]) for c in range(4) if c not in greedy}
        pick = chosen[("greedy", k)]
        added = [c for c in pick if c not in greedy]
        assert len(added) == 1 and values[added[0]] == pytest.approx(min(values.values()), rel=1e-5, abs=2e-6)
        greedy = pick
    # every score: the independently pruned copy, hand-written kl
    for row in curve.itertuples():
        expected = hand_kl(ids(row.removed))
        # kl is summed from float32 log-softmaxes (float64 would double the logits' memory): ~1e-6 absolute
        assert row.score == pytest.approx(expected, rel=1e-5, abs=2e-6), row
        assert row.fraction == pytest.approx(row.k / 4) and row.baseline == 0
        # --keep-by bound (the default): the worse end of the paired interval within kl <= ln(1/0.95); no interval,
        # or under 10 probe sequences: never
        enough = json.loads((out / "summary.json").read_text())["documents"] >= 10
        assert row.within == (enough and row.delta_hi == row.delta_hi and row.baseline + row.delta_hi <= -math.log(0.95))
    summary = json.loads((out / "summary.json").read_text())
    for strategy, verdict in summary["curve"].items():
        ok = curve[(curve.strategy == strategy) & curve.within]
        assert verdict["max_k"] == (int(ok["k"].max()) if len(ok) else 0)
    assert (out / "curve.png").is_file() and summary["command"] == "curve"


def test_minilm_drift_curve_with_an_angular_run_beside_it(minilm_dir, tmp_path):
    angular = invoke("angular", str(minilm_dir), *DATA, "--out", str(tmp_path / "angular"))
    assert angular.exit_code == 0, angular.output
    out = tmp_path / "curve-drift"
    result = invoke("prune", str(minilm_dir), "--task", "drift", "--curve", "--strategies",
                    "angular,last", "--max-removed", "2", *DATA, "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["angular_run"] == str(tmp_path / "angular") and not (out / "angular").exists()
    curve = pd.read_csv(out / "curve.csv")
    full = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    for row in curve.itertuples():
        pruned = independent_pruned(minilm_dir, transformers.AutoModel, ids(row.removed))
        assert row.score == pytest.approx(reference_metric("drift", full, pruned, minilm_dir, 256, 32, 4), rel=1e-5,
                                          abs=1e-8)


def test_lmeval_curve_against_hand_scored_copies(model_dirs, task_dir, tmp_path):  # noqa: F811
    folder, out = model_dirs["llama"], tmp_path / "curve"
    result = invoke("prune", str(folder), "--task", "tiny_mc", "--include-path", str(task_dir),
                    "--curve", "--strategies", "bi,last", "--max-removed", "2", *DATA, "--out", str(out))
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(out / "curve.csv")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert curve["baseline"].iloc[0] == pytest.approx(hand_accuracy(full, tok))
    for row in curve.itertuples():
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, ids(row.removed))
        assert row.score == pytest.approx(hand_accuracy(pruned, tok)), row


def test_curve_resumes_and_refuses_bad_settings(model_dirs, tmp_path):
    folder = model_dirs["gpt2"]
    args = ["prune", str(folder), "--task", "ppl", "--curve", "--strategies", "greedy,last", "--max-removed", "2",
            *DATA]
    whole = invoke(*args, "--out", str(tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output
    from layerprobe.commands.prune import curve as module

    calls = []

    def interrupt(stage, done, total):
        calls.append(stage)
        if stage == "greedy steps" and done == 1:
            raise KeyboardInterrupt

    config_args = [*args, "--out", str(tmp_path / "cut")]
    original = module.greedy_sets  # the strategy's function, as its record names it (strategies.py)

    def cut(choice):
        import dataclasses

        return original(dataclasses.replace(choice, progress=interrupt))

    module.greedy_sets = cut
    try:
        invoke(*config_args)
    finally:
        module.greedy_sets = original
    state = json.loads((tmp_path / "cut" / "state.json").read_text())
    assert len(state["greedy"]) == 1 and not (tmp_path / "cut" / "summary.json").exists()
    assert "greedy batches" in calls[:calls.index("greedy steps", 1)]  # a step's batches show before it ends
    resumed = invoke(*config_args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    a, b = pd.read_csv(tmp_path / "whole" / "curve.csv"), pd.read_csv(tmp_path / "cut" / "curve.csv")
    assert a[["strategy", "k", "removed"]].equals(b[["strategy", "k", "removed"]])
    assert a["score"].to_numpy() == pytest.approx(b["score"].to_numpy(), rel=1e-9)
    changed = invoke(*args[:-2], "8", "--out", str(tmp_path / "cut"), "--resume")  # another batch size
    assert changed.exit_code == 2


@pytest.mark.parametrize("args,needle", [
    (["--strategies", "angular,best"], "Unknown --strategies 'best'"),
    (["--max-removed", "4"], "--max-removed 4"),
    (["--max-fraction", "1.5"], "--max-fraction must be within (0, 1], got 1.5"),
    (["--greedy-metric", "drift"], "Unknown --greedy-metric 'drift'"),
    (["--keep", "0"], "--keep must be within (0, 1], got 0"),
    (["--block", "2"], "drop --shard, --layers and --block"),
    (["--tokens", "32"], "--tokens 32 at --seq-len 32 is one sequence, which has no interval"),  # --keep-by bound
])
def test_bad_curve_settings(args, needle, model_dirs, tmp_path):
    result = invoke("prune", str(model_dirs["llama"]), "--task", "kl", "--curve", *DATA, *args,
                    "--out", str(tmp_path / "x"))
    assert_error(result, needle)


def test_compare_judges_curve_scores(model_dirs, tmp_path):
    folder = model_dirs["llama"]
    args = ["prune", str(folder), "--task", "ppl", "--curve", "--strategies", "last", "--max-removed", "2", *DATA]
    assert invoke(*args, "--out", str(tmp_path / "a")).exit_code == 0
    assert invoke(*args, "--out", str(tmp_path / "b")).exit_code == 0
    same = invoke("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert same.exit_code == 0, same.output
    curve = pd.read_csv(tmp_path / "b" / "curve.csv")
    curve.loc[1, "score"] = curve.loc[1, "score"] * 3  # k=2 of 'last' triples its perplexity
    curve.to_csv(tmp_path / "b" / "curve.csv", index=False)
    worse = invoke("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert worse.exit_code == 1 and "last k=2" in worse.output, worse.output


def test_a_metric_and_a_strategy_added_by_record_alone_run_a_curve(model_dirs, tmp_path):
    """The dummy's metric (absdiff) and strategy (front), registered by one line each and named by no module of
    layerprobe (tests/test_source_scans.py), run a whole curve: front's sets are the first k layers and every
    score matches a hand-written mean |h_pruned - h| of an independently shortened copy."""
    from layerprobe.evaluation.metric import METRICS, register_metric
    from layerprobe.strategies import STRATEGIES, register_strategy
    from tests.data.dummy_command import METRIC, STRATEGY

    from .helpers import batches, open_corpus
    import torch

    register_metric(METRIC)
    register_strategy(STRATEGY)
    try:
        folder, out = model_dirs["llama"], tmp_path / "curve"
        result = invoke("prune", str(folder), "--task", "absdiff", "--curve", "--strategies", "front,last",
                        "--max-removed", "2", "--keep-by", "point", *DATA, "--out", str(out))
    finally:
        METRICS.pop(METRIC.name)
        STRATEGIES.pop(STRATEGY.name)
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(out / "curve.csv")
    assert {(r.strategy, r.k): ids(r.removed) for r in curve.itertuples()} == {
        ("front", 1): [0], ("front", 2): [0, 1], ("last", 1): [3], ("last", 2): [2, 3]}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategies"] == ["front", "last"] and summary["greedy_metric"] is None
    full = transformers.AutoModel.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    for row in curve.itertuples():
        pruned = independent_pruned(folder, transformers.AutoModel, ids(row.removed))
        total, count = 0.0, 0
        for batch in batches(open_corpus("builtin").texts(), tok, 32, 4, 256):
            with torch.no_grad():
                a = full(input_ids=batch.input_ids).last_hidden_state.double()
                b = pruned(input_ids=batch.input_ids).last_hidden_state.double()
            total += float((b - a).abs().mean(-1).sum())
            count += batch.input_ids.numel()
        assert row.score == pytest.approx(total / count, rel=1e-5)
        assert row.baseline == 0 and bool(row.within) == (row.score <= 1 - 0.95)  # its own rule: 1 - keep
