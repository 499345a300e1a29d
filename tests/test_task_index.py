"""lm-eval's own tasks are indexed once per process (evaluation/harness.py): a manager for a second folder is the
index lm-eval's own TaskManager builds for it, entry for entry, including a local task that replaces a built-in one
and a tag that both define."""

from __future__ import annotations

from pathlib import Path

TASK = """task: {name}
{tag}dataset_path: json
dataset_kwargs:
  data_files:
    validation: data.jsonl
output_type: multiple_choice
validation_split: validation
doc_to_text: "{{{{q}}}}"
doc_to_target: 0
doc_to_choice: ["a", "b"]
metric_list:
  - metric: acc
"""


def _folder(root: Path, names: dict[str, str]) -> str:
    root.mkdir()
    (root / "data.jsonl").write_text('{"q": "x"}\n')
    for name, tag in names.items():
        (root / f"{name}.yaml").write_text(TASK.format(name=name, tag=f"tag:\n  - {tag}\n" if tag else ""))
    return str(root)


def _entries(manager) -> dict:
    return {name: (e.kind, e.yaml_path, sorted(e.tags), e.cfg) for name, e in manager.task_index.items()}


def test_a_second_folder_indexes_as_lm_eval_does(tmp_path):
    from lm_eval.tasks import TaskManager

    from layerprobe.evaluation.harness import _folder_state, task_manager

    first = _folder(tmp_path / "a", {"local_one": ""})
    second = _folder(tmp_path / "b", {"local_two": "ai2_arc", "arc_easy": ""})  # a built-in's tag, a built-in's name
    ours_first = task_manager(first, True, _folder_state(first))
    ours = task_manager(second, True, _folder_state(second))
    plain = TaskManager(include_path=second)  # lm-eval's own build, outside layerprobe's
    assert _entries(ours) == _entries(plain)
    assert ours.all_tasks == plain.all_tasks and "local_one" in ours_first.all_tasks
    assert "local_one" not in ours.all_tasks and "arc_challenge" in ours.all_tasks
    assert ours.task_index["arc_easy"].yaml_path == Path(second) / "arc_easy.yaml"  # the local one replaced it
    assert sorted(ours.task_index["ai2_arc"].tags) == ["local_two"]  # the later folder's tag replaces, as lm-eval's
    from lm_eval.tasks._index import TaskIndex

    assert TaskIndex.__dict__["build"].__func__.__module__ == "lm_eval.tasks._index"  # put back
