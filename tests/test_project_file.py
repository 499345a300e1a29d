"""Every command resolves its settings the same way: a run of toy and export read [tool.layerprobe]."""

from __future__ import annotations

from typer.testing import CliRunner

from layerprobe.cli import app

runner = CliRunner()


def test_export_and_toy_read_the_project(tmp_path, monkeypatch):
    """Every command resolves the same way: toy's run folder and export's model come from [tool.layerprobe]."""
    (tmp_path / "pyproject.toml").write_text('[tool.layerprobe]\nout = "runs"\nmodel = "no-such-folder/x/y"\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["toy", "--depth", "3", "--width", "8", "--samples", "16", "--norm", "pre"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "toy" / "summary.json").is_file()
    result = runner.invoke(app, ["export", "--remove", "0", "--out", str(tmp_path / "e")])
    assert result.exit_code == 2 and "no-such-folder/x/y" in result.output
