"""prune --sample N --seed S: the documents scored are a seeded random sample of each task, recomputed here with
numpy from the seed, the same documents lm-eval itself evaluates when handed them (its logged doc_ids and
per-choice loglikelihoods), and the same through --shard/merge and an interrupted --resume."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pandas as pd
import pytest

from .helpers import assert_error, assert_shards_merge_to, invoke, read_records
from .test_prune_lmeval import QUESTIONS, task_dir  # noqa: F401  (the module's task folder fixture)


def drawn(seed: int, n: int, task: str = "tiny_mc") -> list[int]:
    """The sample by hand: numpy's generator seeded with [seed, crc32(task)], n of the task's documents."""
    rng = np.random.default_rng([seed, zlib.crc32(task.encode("utf-8"))])
    return sorted(int(i) for i in rng.choice(len(QUESTIONS), size=n, replace=False))


def lm_eval_own(model_dir, task_dir, ids):  # noqa: F811
    """lm-eval's own evaluation of the unpruned model on those documents: {doc_id: [loglikelihood per choice]}."""
    import transformers
    from lm_eval import evaluator
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=4)
    tasks = TaskManager(include_path=str(task_dir), include_defaults=False).load(["tiny_mc"])
    results = evaluator.evaluate(lm=lm, task_dict=tasks, samples={"tiny_mc": ids}, log_samples=True,
                                 bootstrap_iters=0, verbosity="ERROR")
    return {int(s["doc_id"]): [float(r[0]) for r in s["filtered_resps"]] for s in results["samples"]["tiny_mc"]}


def test_sample_is_the_seeded_draw_lm_eval_scores(model_dirs, task_dir, tmp_path):  # noqa: F811
    folder = str(model_dirs["llama"])
    common = ["prune", folder, "--task", "tiny_mc", "--include-path", str(task_dir), "--device", "cpu",
              "--batch-size", "4", "--sample", "7", "--seed", "3"]
    whole = tmp_path / "whole"
    result = invoke(*common, "--out", str(whole))
    assert result.exit_code == 0, result.output
    want = drawn(3, 7)
    assert want != list(range(7)) and want != drawn(4, 7)  # a random draw, not lm-eval's first N; the seed matters
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["sample"]["documents"] == {"tiny_mc": want}
    assert (summary["sample"]["n"], summary["sample"]["seed"]) == (7, 3) and summary["limit"] is None
    assert summary["splits"]["tiny_mc"]["scored"] == 7
    mine = read_records(whole)
    for removed, rows in mine.groupby("removed"):
        assert sorted(rows["doc_id"]) == want, removed
    # lm-eval, handed the recomputed sample, evaluates the same documents and gives the same choice loglikelihoods
    theirs = lm_eval_own(folder, task_dir, want)
    assert sorted(theirs) == want
    unpruned = mine[mine["removed"] == "unpruned"].set_index("doc_id")
    for doc, lls in theirs.items():
        np.testing.assert_allclose([unpruned.loc[doc, f"choice_loglik_{i}"] for i in range(len(lls))], lls,
                                   atol=1e-4)

    # the shards of the sampled sweep, merged, are the sweep
    merged = assert_shards_merge_to(mine, tmp_path, *common)
    assert json.loads((merged / "summary.json").read_text())["sample"] == summary["sample"]


def test_sample_survives_an_interrupted_resume(model_dirs, task_dir, tmp_path):  # noqa: F811
    """Cut after two variants (each scored on its own), resumed: the same sampled documents, the same records."""
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import ModelOptions, PruneConfig

    def config(out, resume=False):
        return PruneConfig(task="tiny_mc", model=ModelOptions(model=str(model_dirs["llama"]), device="cpu"),
                           include_path=str(task_dir), sample=6, seed=11, shared_prefix=False, out=str(out),
                           resume=resume, formats=())

    def cut(stage, done, total):
        if stage == "variants" and done == 2:
            raise KeyboardInterrupt

    whole = run_prune(config(tmp_path / "whole"))
    with pytest.raises(KeyboardInterrupt):
        run_prune(config(tmp_path / "cut"), cut)
    assert not (tmp_path / "cut" / "summary.json").exists()
    resumed = run_prune(config(tmp_path / "cut", resume=True))
    assert resumed.summary["sample"]["documents"] == {"tiny_mc": drawn(11, 6)}
    key = ["removed", "doc_id"]
    a, b = read_records(whole.folder), read_records(resumed.folder)
    pd.testing.assert_frame_equal(a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True),
                                  check_exact=True)


def test_sample_and_limit_refused_together(model_dirs, task_dir, tmp_path):  # noqa: F811
    result = invoke("prune", str(model_dirs["llama"]), "--task", "tiny_mc", "--include-path", str(task_dir),
                    "--sample", "5", "--limit", "5", "--out", str(tmp_path / "x"))
    assert_error(result, "--sample 5 and --limit 5 both choose the documents")
    result = invoke("prune", str(model_dirs["llama"]), "--task", "ppl", "--sample", "5", "--out", str(tmp_path / "y"))
    assert_error(result, "--sample 5 does nothing with --task ppl")
    result = invoke("prune", str(model_dirs["llama"]), "--task", "tiny_mc", "--include-path", str(task_dir),
                    "--seed", "5", "--out", str(tmp_path / "z"))
    assert_error(result, "--seed 5 does nothing without --sample")
