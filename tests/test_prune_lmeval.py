"""lm-eval sweeps on a local multiple-choice YAML task, checked against hand-scored loglikelihoods."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from typer.testing import CliRunner

from layerprobe.cli import app

from .test_surgery import independent_pruned

QUESTIONS = [
    ("The sky on a clear day is", ["blue", "green", "loud"], 0),
    ("Water freezes at zero degrees", ["celsius", "kelvin", "volts"], 0),
    ("A cat is a kind of", ["car", "animal", "number"], 1),
    ("The opposite of hot is", ["cold", "tall", "fast"], 0),
    ("Two plus two equals", ["five", "three", "four"], 2),
    ("Paris is the capital of", ["spain", "france", "italy"], 1),
    ("Bees make", ["honey", "bread", "steel"], 0),
    ("The sun rises in the", ["west", "north", "east"], 2),
]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    data = folder / "mc.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n" for q, c, a in QUESTIONS))
    (folder / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return folder


def hand_accuracy(model, tok):
    """lm-eval's loglikelihood definition: continuation = tokens of (context + ' ' + choice) after the context,
    both encoded with the tokenizer's default special tokens (as HFLM.tok_encode does)."""
    correct = 0
    for question, choices, answer in QUESTIONS:
        scores = []
        for choice in choices:
            ctx = tok.encode(question)
            whole = tok.encode(question + " " + choice)
            cont = whole[len(ctx):]
            ids = torch.tensor([ctx + cont])
            with torch.no_grad():
                logp = model(input_ids=ids).logits[0].double().log_softmax(-1)
            scores.append(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)))
        correct += int(np.argmax(scores) == answer)
    return correct / len(QUESTIONS)


def test_lmeval_sweep_matches_hand_scoring(model_dirs, task_dir, tmp_path):
    folder = model_dirs["llama"]
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["prune", str(folder), "--task", "tiny_mc", "--include-path", str(task_dir),
                                      "--device", "cpu", "--batch-size", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "prune.csv")
    acc = table[table["metric"] == "acc"].sort_values("layer")
    assert acc["layer"].tolist() == [0, 1, 2, 3]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert acc["baseline"].iloc[0] == pytest.approx(hand_accuracy(full, tok))
    for row in acc.itertuples():
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, [row.layer])
        assert row.pruned == pytest.approx(hand_accuracy(pruned, tok)), row
    assert acc["pruned_stderr"].notna().all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "acc" and summary["higher_is_better"] is True
    assert (out / "prune.png").is_file()


def test_unknown_task_suggests(model_dirs, task_dir, tmp_path):
    result = CliRunner().invoke(app, ["prune", str(model_dirs["llama"]), "--task", "tiny_mx", "--include-path",
                                      str(task_dir), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "Did you mean: tiny_mc" in result.output


def test_missing_include_path_and_encoder(model_dirs, task_dir, tmp_path):
    result = CliRunner().invoke(app, ["prune", str(model_dirs["llama"]), "--task", "tiny_mc", "--include-path",
                                      str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = CliRunner().invoke(app, ["prune", str(model_dirs["bert"]), "--task", "tiny_mc", "--include-path",
                                      str(task_dir), "--out", str(tmp_path / "y")])
    assert result.exit_code == 2 and "encoder" in result.output
