"""Issue 49, a researcher's first hour: what a newcomer meets outside the demo's resume (tests/test_demo_resume.py)."""

from __future__ import annotations

import shutil

from layerprobe.runs.folder import LOCK

from .helpers import DEMO_REFERENCE, invoke


def test_report_names_every_run_it_leaves_out_with_the_reason(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(DEMO_REFERENCE / "angular", runs / "angular")
    shutil.copytree(DEMO_REFERENCE / "gradnorm", runs / "gradnorm")
    broken = shutil.copytree(DEMO_REFERENCE / "prune-drift", runs / "broken")
    (broken / "manifest.json").write_text("{not json")
    unfinished = runs / "cut"
    unfinished.mkdir()
    (unfinished / LOCK).write_text("unfinished\ncommand angular\n")
    half = shutil.copytree(DEMO_REFERENCE / "smollm2-angular", runs / "half")
    (half / LOCK).write_text("unfinished\ncommand angular\n")  # a resumed run, rewriting its outputs

    result = invoke("report", runs, "--out", tmp_path / "page")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "2 run(s)" in text
    assert f"left out {broken}: '{broken / 'manifest.json'}' is not valid JSON" in text, text
    assert f"left out {unfinished}: an unfinished run (its {LOCK} is there" in text, text
    assert f"left out {half}: '{half}' is an unfinished run" in text, text
    page = (tmp_path / "page" / "report.md").read_text()
    assert "## Left out" in page and all(str(p) in page for p in (broken, unfinished, half))
