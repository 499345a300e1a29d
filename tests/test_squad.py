"""SQuAD v1.1: official EM/F1 on hand-computed cases, span selection, and a pruning sweep on a QA head
built from config, checked against HF's model scored question by question."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from layerprobe.errors import DatasetError
from layerprobe.evaluation.squad import best_span, exact_match, f1_score, load_questions, normalize_answer
from .helpers import independent_pruned, invoke


@pytest.mark.parametrize("prediction, gold, em, f1", [
    ("the Eiffel Tower", ["Eiffel tower"], 1.0, 1.0),  # article and case dropped
    ("Paris, France", ["Paris"], 0.0, 2 * 0.5 * 1.0 / 1.5),  # P = 1/2, R = 1
    ("in 1889.", ["1889"], 0.0, 2 * 0.5 * 1.0 / 1.5),
    ("red blue", ["blue green red"], 0.0, 2 * 1.0 * (2 / 3) / (1 + 2 / 3)),
    ("nothing", ["else", "Nothing!"], 1.0, 1.0),  # best over gold answers
    ("a an the", ["the"], 1.0, 0.0),  # both normalize to "": equal, but v1.1 F1 has no common token
    ("", ["Denver Broncos"], 0.0, 0.0),
    ("cat cat", ["cat"], 0.0, 2 * 0.5 * 1.0 / 1.5),  # counts are clipped: P = 1/2
])
def test_official_em_f1_by_hand(prediction, gold, em, f1):
    assert exact_match(prediction, gold) == em
    assert f1_score(prediction, gold) == pytest.approx(f1, abs=1e-12)


def test_normalize_answer():
    assert normalize_answer("  The  Quick, brown-fox (an ANIMAL)! ") == "quick brownfox animal"
    assert normalize_answer("theatre at a theme") == "theatre at theme"  # articles only as whole words


def test_best_span_by_hand():
    context = "alpha beta gamma delta"
    offsets = [None, None, (0, 5), (6, 10), (11, 16), (17, 22), None]  # [CLS] q [ctx x4] [SEP]
    start = [9.0, 8.0, 1.0, 3.0, 0.0, 0.0, 9.0]
    end = [9.0, 8.0, 0.0, 0.5, 2.0, 0.0, 9.0]
    # valid pairs only inside the context with end >= start: best is start 3 ("beta") + end 4 ("gamma")
    assert best_span([(start, end, offsets)], context) == "beta gamma"
    assert best_span([(start, end, offsets)], context, max_answer=1) == "beta"  # s=3, e=3: 3.0 + 0.5 beats 1 + 0
    # across windows the higher total wins
    other = ([0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0], offsets)
    assert best_span([(start, end, offsets), other], context) == "alpha"
    assert best_span([(start, end, [None] * 7)], context) == ""


def squad_json(path, long_context):
    paragraphs = [
        {"context": "The river Severn flows through Shrewsbury and Worcester before it reaches the sea near Bristol.",
         "qas": [{"id": "q1", "question": "Which river flows through Shrewsbury?",
                  "answers": [{"text": "Severn", "answer_start": 10}, {"text": "river Severn", "answer_start": 4}]},
                 {"id": "q2", "question": "Where does the river reach the sea?",
                  "answers": [{"text": "near Bristol", "answer_start": 83}]}]},
        {"context": "Ada Lovelace wrote the first published algorithm meant for a machine, the Analytical Engine.",
         "qas": [{"id": "q3", "question": "Who wrote the first published algorithm?",
                  "answers": [{"text": "Ada Lovelace", "answer_start": 0}]}]},
        {"context": long_context,
         "qas": [{"id": "q4", "question": "What statement runs code only when a condition is true?",
                  "answers": [{"text": "the if statement", "answer_start": 0}]},
                 {"id": "q5", "question": "What does a loop repeat?", "answers": [{"text": "the suite", "answer_start": 0}]}]},
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def qa_setup(tmp_path_factory, tokenizer):
    import transformers
    from pydoc_data.topics import topics

    root = tmp_path_factory.mktemp("squad")
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=512)
    torch.manual_seed(0)
    transformers.BertForQuestionAnswering(config).save_pretrained(root / "bert-qa")
    tokenizer.save_pretrained(root / "bert-qa")
    long_context = " ".join((topics["if"] + " " + topics["while"] + " " + topics["for"]).split())[:3500]
    data = squad_json(root / "dev.json", long_context)
    return root / "bert-qa", data


def reference_predictions(model, tok, questions):
    """Question by question, window by window, no padding; n-best 20 x 20 over numpy argsort."""
    answers = []
    for q in questions:
        enc = tok(q.question.lstrip(), q.context, truncation="only_second", max_length=384, stride=128,
                  return_overflowing_tokens=True, return_offsets_mapping=True)
        best, text = -np.inf, ""
        for w in range(len(enc["input_ids"])):
            ids = torch.tensor([enc["input_ids"][w]])
            with torch.no_grad():
                out = model(input_ids=ids, token_type_ids=torch.tensor([enc["token_type_ids"][w]]))
            s_log, e_log = out.start_logits[0].numpy(), out.end_logits[0].numpy()
            seq = enc.sequence_ids(w)
            for s in np.argsort(-s_log)[:20]:
                for e in np.argsort(-e_log)[:20]:
                    if seq[s] != 1 or seq[e] != 1 or e < s or e - s >= 30:
                        continue
                    if s_log[s] + e_log[e] > best:
                        best = s_log[s] + e_log[e]
                        text = q.context[enc["offset_mapping"][w][s][0]:enc["offset_mapping"][w][e][1]]
        answers.append(text)
    return answers


def scores(predictions, questions):
    em = np.mean([100 * exact_match(p, q.answers) for p, q in zip(predictions, questions)])
    f1 = np.mean([100 * f1_score(p, q.answers) for p, q in zip(predictions, questions)])
    return {"exact_match": em, "f1": f1}


def test_squad_sweep_matches_hf_question_by_question(qa_setup, tokenizer, tmp_path):
    import transformers

    folder, data = qa_setup
    questions = load_questions(str(data))
    assert [q.id for q in questions] == ["q1", "q2", "q3", "q4", "q5"]
    assert len(tokenizer(questions[3].context)["input_ids"]) > 384  # the long context needs several windows
    out = tmp_path / "run"
    result = invoke("prune", str(folder), "--task", "squad", "--dataset", str(data),
                    "--batch-size", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "prune.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "f1" and summary["windows"] > len(questions)
    full = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
    expected = scores(reference_predictions(full, tokenizer, questions), questions)
    for layer in range(4):
        pruned = independent_pruned(folder, transformers.BertForQuestionAnswering, [layer])
        got = scores(reference_predictions(pruned, tokenizer, questions), questions)
        for metric in ("exact_match", "f1"):
            row = table[(table.layer == layer) & (table.metric == metric)].iloc[0]
            assert row.baseline == pytest.approx(expected[metric], abs=1e-9)
            assert row.pruned == pytest.approx(got[metric], abs=1e-9)
            assert row.delta == pytest.approx(got[metric] - expected[metric], abs=1e-9)


def test_squad_predictions_match_reference(qa_setup, tokenizer):
    """The answers themselves, not only the averages, equal the reference's."""
    import transformers

    from layerprobe.evaluation.squad import SquadTask

    folder, data = qa_setup
    model = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
    task = SquadTask(str(data), batch_size=2).build()
    task.prepare(model, tokenizer)
    with torch.no_grad():
        got = task.predictions(model)
    assert got == reference_predictions(model, tokenizer, task.questions)
    assert all(got)  # every question gets a non-empty span from a valid window


def test_squad_formats_and_limit(qa_setup, tmp_path):
    _, data = qa_setup
    official = load_questions(str(data))
    rows = [{"id": q.id, "question": q.question, "context": q.context,
             "answers": {"text": q.answers, "answer_start": [0] * len(q.answers)}} for q in official]
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    assert load_questions(str(jsonl)) == official
    assert [q.id for q in load_questions(str(data), limit=2)] == ["q1", "q2"]
    assert len(load_questions(str(data), limit=0.5)) == 3


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ('{"rows": []}', "not in SQuAD format"),
    ('{"data": []}', "holds no questions"),
    ('[{"question": "q", "context": "c", "answers": []}]', "no gold answer"),
    ('[{"context": "c", "answers": ["x"]}]', "not a SQuAD record"),
])
def test_bad_squad_files(content, needle, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=needle):
        load_questions(str(path))


def test_squad_cli_errors(qa_setup, minilm_dir, model_dirs, tmp_path):
    folder, data = qa_setup
    cases = [
        (["prune", "minilm", "--task", "squad", "--dataset", str(data)], "trained question-answering head"),
        (["prune", str(folder), "--task", "squad", "--dataset", str(tmp_path / "missing.json")], "does not exist"),
        (["prune", str(folder), "--task", "squad", "--dataset", "rajpurkar/squad"], "offline"),
        (["prune", str(folder), "--task", "squad", "--dataset", str(data), "--limit", "0"], "--limit"),
    ]
    for args, needle in cases:
        result = invoke(*args + ["--out", str(tmp_path / "r")])
        assert result.exit_code == 2, result.output
        assert needle in result.output and "Traceback" not in result.output
