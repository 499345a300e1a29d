"""Per-document records (samples.csv.gz) of real sweeps on tiny models, checked against independent references:
hand-scored loglikelihoods of an independently pruned model, lm-eval's own acc/acc_norm, a hand-computed paired
interval; and exact through --resume and merge."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from scipy import stats

from .helpers import assert_shards_merge_to, independent_pruned, invoke, read_records
from .test_prune_lmeval import QUESTIONS, task_dir  # noqa: F401  (the module's task folder fixture)


def hand_choices(model, tok):
    """Per question: the loglikelihood of every choice (lm-eval's definition, as test_prune_lmeval's hand_accuracy:
    the tokens of context + ' ' + choice after the context's, scored after the context's own tokens), float64."""
    out = []
    for question, choices, _ in QUESTIONS:
        scores = []
        for choice in choices:
            ctx = tok.encode(question)
            cont = tok.encode(question + " " + choice)[len(ctx):]
            with torch.no_grad():
                logp = model(input_ids=torch.tensor([ctx + cont])).logits[0].double().log_softmax(-1)
            scores.append(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)))
        out.append(scores)
    return out


def hand_margins(rows):
    """Per document, by a plain loop over the records' choice_loglik_<i>: gold minus the best other choice."""
    out = []
    for row in rows.to_dict("records"):
        lls = [row[f"choice_loglik_{i}"] for i in range(3)]
        out.append(lls[int(row["gold"])] - max(x for i, x in enumerate(lls) if i != int(row["gold"])))
    return out


def hand_interval(before, after):
    """The paired 95% interval of mean(after) - mean(before), by hand: t with n - 1 degrees of freedom."""
    d = np.asarray(after, float) - np.asarray(before, float)
    se = d.std(ddof=1) / math.sqrt(len(d))
    half = stats.t.ppf(0.975, len(d) - 1) * se
    return d.mean(), se, d.mean() - half, d.mean() + half


def test_lmeval_records_match_hand_scoring_and_the_table(model_dirs, task_dir, tmp_path):  # noqa: F811
    folder, out = model_dirs["llama"], tmp_path / "run"
    result = invoke("prune", str(folder), "--task", "tiny_mc", "--include-path", str(task_dir), "--device", "cpu",
                    "--batch-size", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    records, table = read_records(out), pd.read_csv(out / "prune.csv")
    assert sorted(set(records["removed"])) == ["0", "1", "2", "3", "unpruned"]
    assert len(records) == 5 * len(QUESTIONS) and not records.duplicated(["removed", "task", "doc_id"]).any()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    unpruned = records[records["removed"] == "unpruned"].sort_values("doc_id")
    for row in table[table["metric"] == "acc"].itertuples():
        mine = records[records["removed"] == str(row.removed)].sort_values("doc_id")
        # the table's scores are lm-eval's own acc: the records' mean reproduces them exactly
        assert sum(mine["acc"]) / len(mine) == row.pruned and sum(unpruned["acc"]) / len(unpruned) == row.baseline
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, [int(row.removed)])
        scores = hand_choices(pruned, tok)
        gold = [a for _, _, a in QUESTIONS]
        assert mine["gold"].tolist() == gold
        assert mine["chosen"].tolist() == [int(np.argmax(s)) for s in scores]
        assert mine["acc"].tolist() == [float(int(np.argmax(s)) == g) for s, g in zip(scores, gold)]
        np.testing.assert_allclose(mine["gold_loglik"], [s[g] for s, g in zip(scores, gold)], atol=1e-4)
        lengths = [len(c[g]) for (_, c, _), g in zip(QUESTIONS, gold)]
        np.testing.assert_allclose(mine["gold_loglik_norm"], mine["gold_loglik"] / lengths, rtol=1e-12)
        delta, se, lo, hi = hand_interval(unpruned["acc"], mine["acc"])
        assert row.delta == pytest.approx(delta, abs=1e-12)
        if se > 0:
            assert (row.delta_stderr, row.delta_lo, row.delta_hi) == pytest.approx((se, lo, hi), rel=1e-9)
        ll = hand_interval(unpruned["gold_loglik"], mine["gold_loglik"])
        assert (row.loglik_delta, row.loglik_lo, row.loglik_hi) == pytest.approx((ll[0], ll[2], ll[3]), rel=1e-9)
        hand_p = 2 * stats.t.sf(abs(ll[0]) / ll[1], len(mine) - 1)  # the t test of the mean paired difference
        assert row.loglik_p_value == pytest.approx(hand_p, rel=1e-6)
        # every choice's loglikelihood, and the margin (gold minus the best wrong choice) with its paired interval
        for i in range(3):
            np.testing.assert_allclose(mine[f"choice_loglik_{i}"], [sc[i] for sc in scores], atol=1e-4)
        hand_margin = [sc[g] - max(x for j, x in enumerate(sc) if j != g) for sc, g in zip(scores, gold)]
        np.testing.assert_allclose(hand_margins(mine), hand_margin, atol=2e-4)
        m = hand_interval(hand_margins(unpruned), hand_margins(mine))
        assert (row.margin_delta, row.margin_lo, row.margin_hi) == pytest.approx((m[0], m[2], m[3]), rel=1e-9)
        assert row.margin_p_value == pytest.approx(2 * stats.t.sf(abs(m[0]) / m[1], len(mine) - 1), rel=1e-6)
    # loglik_significant: Holm over the 4 removals, applied by hand to the hand p-values
    rows = table[table["metric"] == "acc"].sort_values("loglik_p_value")
    still = True
    for rank, row in enumerate(rows.itertuples()):
        still = still and row.loglik_p_value <= 0.05 / (len(rows) - rank)
        assert row.loglik_significant == (still and (row.loglik_lo > 0 or row.loglik_hi < 0))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == "samples.csv.gz" and summary["correction"] == "holm"
    main = table[table["metric"] == "acc"]
    assert summary["significant"] == [str(x) for x in main[main["significant"]].sort_values("delta")["removed"]]


def test_taskfree_records_reproduce_the_table_and_survive_merge(model_dirs, corpus_file, tmp_path):
    """ppl per sequence: exp(sum of NLL / positions) over the records is the table's ppl; the shards of a sweep
    merged give the unsharded sweep's records and intervals exactly."""
    common = [str(model_dirs["llama"]), "--task", "ppl", "--dataset", str(corpus_file), "--tokens", "1024",
              "--seq-len", "64", "--batch-size", "4", "--device", "cpu"]
    whole = tmp_path / "whole"
    assert invoke("prune", *common, "--out", str(whole)).exit_code == 0
    records, table = read_records(whole), pd.read_csv(whole / "prune.csv")
    assert len(records) == 5 * 16 and set(records["tokens"]) == {63}
    for removed, rows in records.groupby("removed"):
        ppl = math.exp(rows["total"].sum() / rows["tokens"].sum())
        want = table["baseline"].iloc[0] if removed == "unpruned" else \
            table.loc[table["removed"].astype(str) == removed, "pruned"].iloc[0]
        assert ppl == pytest.approx(want, rel=1e-12)
    assert table["delta_stderr"].notna().all() and (table["delta_lo"] < table["delta"]).all()
    merged = assert_shards_merge_to(records, tmp_path, "prune", *common)
    pd.testing.assert_frame_equal(pd.read_csv(merged / "prune.csv"), table, check_exact=True)
