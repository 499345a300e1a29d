"""The real MiniLM (BERT) is read as Post-LN from its blocks' structure, in angular's summary and in the report."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from layerprobe.cli import app


def test_the_real_minilm_is_post_ln_in_the_summary_and_the_report(tmp_path):
    out = tmp_path / "runs" / "angular"
    runner = CliRunner()
    result = runner.invoke(app, ["angular", "minilm", "--dataset", "builtin", "--tokens", "256", "--seq-len", "64",
                                 "--batch-size", "2", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["placement"] == "post" and summary["placement_by_layer"] == ["post"] * 6
    assert runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "page")]).exit_code == 0
    assert "Post-LN (the residual sum normalized)" in (tmp_path / "page" / "report.md").read_text()
