"""The columns a records file's task is scored from are required where they are read (issue 47 rule 3): the record
declares tokens and total optional (only ppl, kl and drift have them), so a task-free file that lost one, or an
lm-eval file with no metric column left, is one line naming the file (and the row), never an interval or a merged
verdict from what is left. A summary merge carries on holds no key this version does not know."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from layerprobe.commands import COMMANDS  # noqa: F401  (registers the records)
from layerprobe.errors import RunError
from layerprobe.evaluation.records import FILE, read_frame
from layerprobe.runs.read import load_run
from layerprobe.runs.schema import check_known_keys
from tests.helpers import DEMO_REFERENCE


def put(folder, text: str) -> None:
    (folder / FILE).write_bytes(gzip.compress(text.encode()))


KL = "removed,task,doc_id,tokens,total\nunpruned,kl,0,16,0.0\nunpruned,kl,1,16,0.0\n1,kl,0,16,0.5\n1,kl,1,16,0.25\n"


def test_whole_task_free_records_read(tmp_path):
    put(tmp_path, KL)
    assert len(read_frame(tmp_path)) == 4


@pytest.mark.parametrize("column", ["tokens", "total"])
def test_a_task_free_file_without_its_column_is_one_line(tmp_path, column):
    rows = [line.split(",") for line in KL.splitlines()]
    at = rows[0].index(column)
    put(tmp_path, "\n".join(",".join(r[:at] + r[at + 1:]) for r in rows) + "\n")
    with pytest.raises(RunError, match=f"lacks the column '{column}'") as caught:
        read_frame(tmp_path)
    assert "\n" not in str(caught.value) and FILE in str(caught.value)


def test_an_empty_total_in_a_task_free_row_names_its_row(tmp_path):
    put(tmp_path, KL.replace("1,kl,1,16,0.25", "1,kl,1,16,"))
    with pytest.raises(RunError, match="row 4, column total: empty"):
        read_frame(tmp_path)


def test_an_lm_eval_file_needs_a_metric_column(tmp_path):
    put(tmp_path, "removed,task,doc_id,gold,chosen,acc\nunpruned,arc_easy,0,1,1,1.0\n1,arc_easy,0,1,0,0.0\n")
    assert list(read_frame(tmp_path)["acc"]) == [1.0, 0.0]
    put(tmp_path, "removed,task,doc_id,gold,chosen\nunpruned,arc_easy,0,1,1\n1,arc_easy,0,1,0\n")
    with pytest.raises(RunError, match="lacks every per-document metric column"):
        read_frame(tmp_path)


def test_a_summary_key_this_version_does_not_know_is_named(tmp_path):
    run = shutil.copytree(DEMO_REFERENCE / "prune-drift", tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    check_known_keys(run / "summary.json", "prune", summary)  # the committed run: every key declared
    (run / "summary.json").write_text(json.dumps({**summary, "future_setting": 3, "another": 1}))
    loaded = load_run(run)  # the commands that only read leave it alone
    with pytest.raises(RunError, match=r"does not know \(another, future_setting\)"):
        check_known_keys(run / "summary.json", loaded.command, loaded.summary)
