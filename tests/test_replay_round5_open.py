"""The cases an independent replay of issue 47 left open, one class each: a ranking sentence never orders a tie and
says "by point estimate" wherever it rests on points; --task takes one task; --num-fewshot on a task without a
few-shot split is refused; a broken local YAML task names its file and its problem; a two-subtask group claims no
minimum detectable effect or clustered interval from a zero stderr on 1 degree of freedom."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.helpers import assert_error, invoke
from tests.test_prune_lmeval import QUESTIONS, task_dir  # noqa: F401 (the fixture)


def _words(result) -> str:
    return " ".join(result.output.split())  # a long line wraps


def test_a_tie_is_said_to_be_one_and_points_are_said_to_be_points(model_dirs, task_dir, tmp_path):  # noqa: F811
    """B05: one document, both removals at the same acc: the last line said 'least important: 0; most important: 1'.
    B04: one probe sequence (no interval): 'least important: 1; most important: 0' without 'by point estimate'."""
    one = invoke("prune", model_dirs["llama"], "--task", "tiny_mc", "--include-path", task_dir, "--limit", "1",
                 "--layers", "0,1", "--device", "cpu", "--batch-size", "2", "--out", tmp_path / "one")
    assert one.exit_code == 0, one.output
    table = pd.read_csv(tmp_path / "one" / "prune.csv")
    main = table[table["metric"] == "acc"]
    assert main["delta"].nunique() == 1  # the case: one 0/1 document, both removals tie
    text = _words(one)
    assert "least important:" not in text and "most important:" not in text
    assert "every removal gives the same acc by point estimate: tied, none can be ordered" in text
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["least_important"] == [] and summary["most_important"] == []

    kl = invoke("prune", model_dirs["llama"], "--task", "kl", "--dataset", "builtin", "--seq-len", "16",
                "--batch-size", "2", "--tokens", "16", "--layers", "0,1", "--device", "cpu", "--out", tmp_path / "kl")
    assert kl.exit_code == 0, kl.output
    deltas = pd.read_csv(tmp_path / "kl" / "prune.csv").set_index("removed")["delta"]
    assert deltas[0] != deltas[1] and pd.read_csv(tmp_path / "kl" / "prune.csv")["delta_lo"].isna().all()
    cheap, costly = (0, 1) if deltas[0] < deltas[1] else (1, 0)  # kl: lower is better, the cheaper removal
    assert (f"least important by point estimate: {cheap}; most important by point estimate: {costly}"
            in _words(kl))


def test_a_comma_list_of_tasks_is_refused_by_name(model_dirs, task_dir, tmp_path):  # noqa: F811
    """A10, D18: 'zs_mc,shot_mc' was looked up as one task name ("Unknown task 'zs_mc,shot_mc'. Did you mean ...");
    it is a list, which --task does not take, for a sweep and a curve alike."""
    for curve in ([], ["--curve", "--strategies", "last", "--max-removed", "1"]):
        result = invoke("prune", model_dirs["llama"], "--task", "tiny_mc,tiny_mc", "--include-path", task_dir,
                        "--limit", "2", *curve, "--device", "cpu", "--out", tmp_path / "p")
        assert_error(result, "--task takes one task or group, got a list 'tiny_mc,tiny_mc': run one prune per task")
        assert "Unknown task" not in result.output and not (tmp_path / "p").exists()


def _mc_yaml(folder, name: str, extra: str = "", data: str | None = None, keys: str = "") -> None:
    """A local multiple-choice task over QUESTIONS (its data file written beside it unless `data` names one)."""
    if data is None:
        data = str(folder / "mc.jsonl")
        (folder / "mc.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n"
                                                 for q, c, a in QUESTIONS))
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n{extra}"
        f"test_split: test\n{keys}output_type: multiple_choice\ndoc_to_text: '{{{{question}}}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")


def test_few_shot_examples_never_come_from_the_scored_split(model_dirs, task_dir, tmp_path):  # noqa: F811
    """A03: --num-fewshot 2 on a task with only a test split passed with lm-eval's own log warning: its examples
    were drawn from the documents it scores. Refused as --num-fewshot beyond the split is (A01); a task whose
    examples come from its training split without naming a fewshot_split runs, and the run says which split."""
    result = invoke("prune", model_dirs["llama"], "--task", "tiny_mc", "--include-path", task_dir, "--num-fewshot",
                    "2", "--limit", "2", "--layers", "0", "--device", "cpu", "--out", tmp_path / "p")
    assert_error(result, "--num-fewshot 2: task 'tiny_mc' names no few-shot split")
    assert "from the split it scores ('test')" in _words(result) and not (tmp_path / "p").exists()

    folder = tmp_path / "train"
    folder.mkdir()
    _mc_yaml(folder, "train_mc", extra=f"    train: {folder / 'mc.jsonl'}\n", keys="training_split: train\n")
    ok = invoke("prune", model_dirs["llama"], "--task", "train_mc", "--include-path", folder, "--num-fewshot", "1",
                "--limit", "2", "--layers", "0", "--device", "cpu", "--out", tmp_path / "t")
    assert ok.exit_code == 0, ok.output
    note = "Few-shot examples of train_mc come from its training split 'train': the task names no fewshot_split"
    assert note in _words(ok)
    assert any(note in w for w in json.loads((tmp_path / "t" / "summary.json").read_text())["warnings"])


def test_a_broken_local_task_names_its_file_and_problem(model_dirs, tmp_path):
    """A11, A13, A14: a local YAML task without doc_to_text ("Could not load task 'nodt_mc': TypeError. Offline: pip
    install ..."), one whose data file is not JSON (install advice again), and one with a YAML syntax error ("Unknown
    task 'syntax_mc'. Did you mean: nodt_mc?"): each one line naming the file and the problem, no install advice."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    _mc_yaml(folder, "good_mc")
    (folder / "nodt_mc.yaml").write_text((folder / "good_mc.yaml").read_text().replace("good_mc", "nodt_mc")
                                         .replace("doc_to_text: '{{question}}'\n", ""))
    (folder / "bad.jsonl").write_text(json.dumps({"question": "q", "choices": ["a"], "answer": 0}) + "\nnot json{\n")
    _mc_yaml(folder, "unread_mc", data=str(folder / "bad.jsonl"))
    _mc_yaml(folder, "gone_mc", data=str(folder / "nowhere.jsonl"))
    (folder / "syntax_mc.yaml").write_text((folder / "good_mc.yaml").read_text().replace("good_mc", "syntax_mc")
                                           + "metric_list: [ {unclosed\n")
    broken = len((folder / "good_mc.yaml").read_text().splitlines()) + 1  # the unclosed line, appended
    expected = {"nodt_mc": f"Task 'nodt_mc' ({folder / 'nodt_mc.yaml'}): it has no doc_to_text (output_type "
                           "multiple_choice needs doc_to_text, doc_to_choice, doc_to_target): add it.",
                "unread_mc": f"Task 'unread_mc' ({folder / 'unread_mc.yaml'}): its data file {folder / 'bad.jsonl'} "
                             "is not JSON lines (line 2: Expecting value",
                "gone_mc": f"its data file {folder / 'nowhere.jsonl'} does not exist: fix data_files in the YAML.",
                "syntax_mc": f"Unknown task 'syntax_mc': {folder / 'syntax_mc.yaml'} is not valid YAML (expected ',' "
                             f"or '}}', but got '<stream end>' at line {broken + 1} (opened at line {broken})), so lm-eval's index "
                             "skipped it: fix the file."}
    from layerprobe.errors import TaskError
    from layerprobe.evaluation.harness import HarnessTask

    for task, message in expected.items():  # the library's error (datasets' own log lines go to stderr beside it)
        with pytest.raises(TaskError) as raised:
            HarnessTask(task, str(folder), limit=2).build()
        assert message in str(raised.value) and "pip install" not in str(raised.value)
        assert "--task-data" not in str(raised.value) and "\n" not in str(raised.value)
    result = invoke("prune", model_dirs["llama"], "--task", "nodt_mc", "--include-path", folder, "--limit", "2",
                    "--layers", "0", "--device", "cpu", "--out", tmp_path / "p")
    assert_error(result, expected["nodt_mc"])  # the CLI: that one line, exit 2
    ok = invoke("prune", model_dirs["llama"], "--task", "good_mc", "--include-path", folder, "--limit", "2",
                "--layers", "0", "--device", "cpu", "--out", tmp_path / "ok")  # the broken neighbours do not matter
    assert ok.exit_code == 0, ok.output


def test_compare_says_a_run_against_itself_is_identical_and_why_no_interval(model_dirs, task_dir, tmp_path):  # noqa: F811
    """B13: `compare b05 b05` said "the runs do not both hold per-document records of the same documents" of two
    identical one-document runs, which hold exactly that. The same folder twice is said to be one run (identical by
    construction); a copy of the run is compared, and the verdict says its records give no interval because one
    document is too few."""
    import shutil

    run = tmp_path / "one"
    assert invoke("prune", model_dirs["llama"], "--task", "tiny_mc", "--include-path", task_dir, "--limit", "1",
                  "--layers", "0,1", "--device", "cpu", "--out", run).exit_code == 0
    for second in (run, f"{run}/", tmp_path / "." / "one"):
        same = invoke("compare", run, second)
        assert same.exit_code == 0, same.output
        assert ("(baseline and new run are the same folder: a run compared with itself is identical by construction, "
                "so this verdict tests nothing)") in _words(same)
    shutil.copytree(run, tmp_path / "copy")
    result = invoke("compare", run, tmp_path / "copy")
    assert result.exit_code == 0, result.output
    text = _words(result)
    assert "do not both hold per-document records" not in text
    assert ("tolerance only: the runs' per-document records of the same documents give no paired interval (too few "
            "documents)") in text


def test_two_subtasks_claim_no_detectable_effect_or_clustered_interval(model_dirs, tmp_path):
    """B08: a 2-subtask group (--cluster subtask) gave 'a test would miss an acc change smaller than about 0' from a
    zero stderr, and a cluster-robust gold-loglikelihood interval on 1 degree of freedom with stderr 0 called a
    removal measurable. Neither is claimed now; summary.json and the findings say why."""
    folder = tmp_path / "grp"
    folder.mkdir()
    for sub in ("sub_a", "sub_b"):  # the same documents in both: every subtask moves alike
        _mc_yaml(folder, sub)
    (folder / "grp.yaml").write_text("group: grp_mc\ntask:\n  - sub_a\n  - sub_b\naggregate_metric_list:\n"
                                     "  - metric: acc\n    aggregation: mean\n    weight_by_size: true\n")
    out = tmp_path / "run"
    result = invoke("prune", model_dirs["llama"], "--task", "grp_mc", "--include-path", folder, "--limit", "2",
                    "--cluster", "subtask", "--layers", "0", "--device", "cpu", "--batch-size", "2", "--out", out)
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())
    table = pd.read_csv(out / "prune.csv")
    assert table[(table["metric"] == "acc")]["delta_stderr"].iloc[0] == 0  # the case, read from the table
    assert s["detectable"]["acc"]["change"] is None and "paired stderr is 0" in s["detectable"]["acc"]["why"]
    assert s["clustered"]["clusters"] == 2 and "acc" not in s["clustered"] and "gold loglikelihood" not in s["clustered"]
    assert "1 degree of freedom, too few for a cluster-robust interval" in s["clustered"]["why"]
    assert invoke("report", out, "--out", tmp_path / "page").exit_code == 0
    page = " ".join((tmp_path / "page" / "report.md").read_text().split())
    assert "smaller than about 0 " not in page and "measurable clustered" not in page
    assert "no cluster-robust interval is claimed beside them" in page


INTERRUPT_AT_IMPORT = """
import importlib.abc, os, signal, sys
target = sys.argv[1]
class Interrupt(importlib.abc.MetaPathFinder):  # Ctrl-C as `target` starts to import: deterministic timing
    def find_spec(self, name, path, target_=None):
        if name == target:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["layerprobe", *sys.argv[2:]]
from layerprobe.cli import main
main()
"""


@pytest.mark.parametrize("target", ["layerprobe.commands.angular.run",  # before the library call: typer's silent 130
                                    "accelerate"])  # inside the library call, before the folder: an import cut short
def test_ctrl_c_before_the_run_folder_is_one_line(target, model_dirs, tmp_path):
    """Ctrl-C while the command sets up or the model loads (an import half-done): exit 130, one line saying nothing
    was written, no traceback, no claim that finished work is kept, no folder. Before: typer's silent exit 130
    outside the library call, and a RecursionError traceback from an import the interrupt broke inside it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT_IMPORT, target, "angular", str(model_dirs["llama"]),
                           "--dataset", "builtin", "--tokens", "64", "--out", str(tmp_path / "a")],
                          capture_output=True, text=True, env=env, timeout=300)
    text = done.stdout + done.stderr
    assert done.returncode == 130, text
    assert "Traceback" not in text and "finished work is kept" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[-1] == ("interrupted: nothing was written (stopped before the run folder was claimed): run the same "
                         "command again."), text
    assert not (tmp_path / "a").exists()
