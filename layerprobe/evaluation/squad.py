"""SQuAD v1.1: the standard extractive-QA evaluation with the official EM and F1.

Questions are tokenized with their context in windows of 384 tokens that overlap by 128 (doc stride);
every window is scored by the model's QA head; for each question the best span over all its windows
is picked from the 20 best start and 20 best end positions (n-best), at most 30 tokens long, inside
the context. EM and F1 follow the official v1.1 script: lower-case, drop punctuation and the articles
a/an/the, collapse whitespace; best over the gold answers; averaged over questions, times 100.
"""

from __future__ import annotations

import json
import math
import os
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.config import SQUAD_DATASET
from layerprobe.data.packing import max_sequence_length
from layerprobe.errors import DatasetError, TaskError


HUB_DATASET = SQUAD_DATASET
MAX_LENGTH = 384  # tokens per window
DOC_STRIDE = 128  # tokens shared by consecutive windows of one context
N_BEST = 20  # start and end candidates per window
MAX_ANSWER = 30  # tokens in an answer span

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Official SQuAD v1.1 normalization: lower, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: list[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold answer."""
    return float(any(normalize_answer(prediction) == normalize_answer(a) for a in answers))


def f1_score(prediction: str, answers: list[str]) -> float:
    """Best token-overlap F1 against the gold answers."""

    def one(gold: str) -> float:
        pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
        same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if same == 0:
            return 0.0
        precision, recall = same / len(pred_tokens), same / len(gold_tokens)
        return 2 * precision * recall / (precision + recall)

    return max(one(a) for a in answers)


@dataclass
class Question:
    """One SQuAD question with its context and gold answers."""

    id: str
    question: str
    context: str
    answers: list[str]


def load_questions(spec: str, limit: float | None = None) -> list[Question]:
    """SQuAD questions from a local JSON/JSONL file or the hub (validation split)."""
    path = Path(spec).expanduser()
    if path.suffix.lower() in (".json", ".jsonl") or path.exists() or spec.startswith((".", "/", "~")):
        if not path.is_file():
            raise DatasetError(f"SQuAD file '{spec}' does not exist: pass a SQuAD-format .json or .jsonl file.")
        questions = _read_local(path)
    else:
        questions = _read_hub(spec)
    if not questions:
        raise DatasetError(f"SQuAD data '{spec}' holds no questions: check the file.")
    if limit is not None:
        count = int(limit) if limit >= 1 else math.ceil(limit * len(questions))
        questions = questions[:count]
    return questions


def _answers(raw: Any, where: str) -> list[str]:
    """Gold answers in any of the usual shapes: {'text': [...]}, [{'text': ...}], or [str]."""
    if isinstance(raw, dict):
        raw = raw.get("text", [])
    texts = [a["text"] if isinstance(a, dict) else a for a in (raw or [])]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise DatasetError(f"{where} has no gold answer text: SQuAD v1.1 needs at least one answer per question.")
    return texts


def _record(item: dict, context: str | None, where: str) -> Question:
    try:
        context = item["context"] if context is None else context
        return Question(str(item.get("id", where)), item["question"], context, _answers(item.get("answers"), where))
    except (KeyError, TypeError):
        raise DatasetError(
            f"{where} is not a SQuAD record: each needs 'question', 'context' and 'answers'."
        ) from None


def _read_local(path: Path) -> list[Question]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            return [_record(row, None, f"{path.name} line {i + 1}") for i, row in enumerate(rows)]
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"'{path}' is not valid JSON ({exc.msg} at line {exc.lineno}): fix or re-export it.") from None
    if isinstance(data, list):  # a list of flat records
        return [_record(row, None, f"{path.name} record {i + 1}") for i, row in enumerate(data)]
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DatasetError(f"'{path}' is not in SQuAD format: expected {{'data': [{{'paragraphs': ...}}]}} or JSONL records.")
    questions = []
    for article in data["data"]:
        for paragraph in article.get("paragraphs", []):
            for qa in paragraph.get("qas", []):
                questions.append(_record(qa, paragraph.get("context"), f"{path.name} question {qa.get('id', '?')}"))
    return questions


def _read_hub(spec: str) -> list[Question]:
    offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        import datasets

        rows = datasets.load_dataset(spec, split="validation")
    except Exception as exc:  # offline, unknown name and bad files all surface differently
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = "the hub is offline here" if offline else "it could not be loaded"
        raise DatasetError(
            f"SQuAD dataset '{spec}' is not available ({why}: {first}): pass a local SQuAD .json/.jsonl with --dataset."
        ) from None
    return [_record(row, None, f"{spec} row {i}") for i, row in enumerate(rows)]


@dataclass
class Windows:
    """Tokenized windows of all questions (padded per batch at scoring time)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    offsets: list[list[tuple[int, int] | None]]  # character span per token, None outside the context
    question: list[int]  # index of the question each window belongs to


def tokenize(questions: list[Question], tokenizer: Any, max_length: int, stride: int) -> Windows:
    """Question + context windows with overlap `stride`, truncating only the context."""
    if not getattr(tokenizer, "is_fast", False):
        raise TaskError("squad needs a fast (Rust) tokenizer for character offsets: save the model with a tokenizer.json.")
    try:
        enc = tokenizer(
            [q.question.lstrip() for q in questions], [q.context for q in questions],
            truncation="only_second", max_length=max_length, stride=stride,
            return_overflowing_tokens=True, return_offsets_mapping=True, padding=False,
        )
    except Exception as exc:  # tokenizers raise when a question leaves no room for the stride
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskError(f"Could not split the SQuAD contexts into windows ({first}): a question is too long for {max_length} tokens.") from None
    offsets = []
    for i, spans in enumerate(enc["offset_mapping"]):
        ids = enc.sequence_ids(i)
        offsets.append([tuple(span) if ids[k] == 1 else None for k, span in enumerate(spans)])
    return Windows(enc["input_ids"], enc.get("token_type_ids"), offsets, list(enc["overflow_to_sample_mapping"]))


def best_span(windows: list[tuple[Any, Any, list]], context: str, n_best: int = N_BEST,
              max_answer: int = MAX_ANSWER) -> str:
    """The highest start+end logit span over a question's windows; '' if none is valid.

    windows: (start_logits, end_logits, offsets) per window, logits as 1-D tensors or lists (top-n via topk).
    """
    import torch

    best, answer = -math.inf, ""
    for start_logits, end_logits, offsets in windows:
        k = min(n_best, len(offsets))
        starts = torch.as_tensor(start_logits, dtype=torch.float64).topk(k)
        ends = torch.as_tensor(end_logits, dtype=torch.float64).topk(k)
        for score_s, s in zip(starts.values.tolist(), starts.indices.tolist()):
            for score_e, e in zip(ends.values.tolist(), ends.indices.tolist()):
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer:
                    continue
                if score_s + score_e > best:
                    best, answer = score_s + score_e, context[offsets[s][0]:offsets[e][1]]
    return answer


@dataclass
class SquadTask:
    """SQuAD v1.1 questions tokenized once and scored for every variant of a sweep."""

    data: str = HUB_DATASET
    limit: float | None = None
    batch_size: int = 8
    questions: list[Question] = field(default_factory=list)
    windows: Windows | None = None
    max_length: int = MAX_LENGTH
    stride: int = DOC_STRIDE
    records: list = field(default_factory=list)  # the last evaluation's per-question records

    def build(self) -> SquadTask:
        self.questions = load_questions(self.data, self.limit)
        return self

    def prepare(self, model: Any, tokenizer: Any) -> list[str]:
        """Tokenize for this model; returns warnings when its window is shorter than 384."""

        warnings = []
        limit = max_sequence_length(model, tokenizer)
        if limit is not None and limit < self.max_length:
            self.max_length, self.stride = limit, min(self.stride, limit // 3)
            warnings.append(f"squad: the model takes {limit} tokens; windows of {limit} with stride {self.stride}.")
        self.windows = tokenize(self.questions, tokenizer, self.max_length, self.stride)
        return warnings

    def predictions(self, model: Any) -> list[str]:
        """The model's answer to every question."""
        import torch

        w = self.windows
        device = next(model.parameters()).device
        logits: list[tuple[Any, Any]] = []
        for first in range(0, len(w.input_ids), self.batch_size):
            rows = range(first, min(first + self.batch_size, len(w.input_ids)))
            width = max(len(w.input_ids[i]) for i in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            types = torch.zeros(len(rows), width, dtype=torch.long)
            for r, i in enumerate(rows):
                n = len(w.input_ids[i])
                ids[r, :n], mask[r, :n] = torch.tensor(w.input_ids[i]), 1
                if w.token_type_ids is not None:
                    types[r, :n] = torch.tensor(w.token_type_ids[i])
            inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
            if w.token_type_ids is not None:
                inputs["token_type_ids"] = types.to(device)
            out = model(**inputs)
            if not hasattr(out, "start_logits"):
                raise TaskError("squad needs a question-answering head (start/end logits): load a QA checkpoint.")
            start, end = out.start_logits.float().cpu(), out.end_logits.float().cpu()  # (batch, width)
            for r, i in enumerate(rows):
                n = len(w.input_ids[i])
                logits.append((start[r, :n], end[r, :n]))
        per_question: list[list] = [[] for _ in self.questions]
        for i, (start, end) in enumerate(logits):
            per_question[w.question[i]].append((start, end, w.offsets[i]))
        return [best_span(spans, q.context) for spans, q in zip(per_question, self.questions)]

    def evaluate(self, model: Any) -> dict[str, tuple[float, float | None]]:
        """{'exact_match': (mean, stderr), 'f1': (mean, stderr)} on the official 0-100 scale."""
        answers = self.predictions(model)
        scores = {
            "exact_match": [100 * exact_match(p, q.answers) for p, q in zip(answers, self.questions)],
            "f1": [100 * f1_score(p, q.answers) for p, q in zip(answers, self.questions)],
        }
        self.records = [{"task": "squad", "doc_id": i, "exact_match": em, "f1": f1}
                        for i, (em, f1) in enumerate(zip(scores["exact_match"], scores["f1"]))]
        return {name: _mean_stderr(values) for name, values in scores.items()}


def _mean_stderr(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)
