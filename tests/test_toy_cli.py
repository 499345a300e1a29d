"""The toy command end to end: the CLI reproduces the Pre-LN random walk (||h_l|| ~ sqrt(l), 1 - cos ~ 1/l) and
Post-LN's constant norm, writing toy.csv's declared columns, the fits and the figure."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from layerprobe.cli import app

runner = CliRunner()


def test_toy_cli_reproduces_the_pre_ln_random_walk(tmp_path):
    result = runner.invoke(app, ["toy", "--norm", "pre,post", "--depth", "64", "--width", "64", "--samples", "512",
                                 "--alpha", "0.5,1", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "t" / "toy.csv")
    assert list(table.columns) == ["norm", "alpha", "layer", "hidden_norm", "cos_next", "cos_input", "effective_rank",
                                   "grad_norm"]
    assert len(table) == 2 * 2 * 64
    fits = json.loads((tmp_path / "t" / "summary.json").read_text())["fits"]
    pre = fits["pre"]["alpha=1"]
    assert 0.35 < pre["hidden_norm"]["slope"] < 0.65  # ||h_l|| ~ sqrt(l)
    assert -1.3 < pre["one_minus_cos_next"]["slope"] < -0.7  # 1 - cos ~ 1/l
    post = table[(table.norm == "post") & (table.alpha == 1.0)]
    assert post["hidden_norm"].std() / post["hidden_norm"].mean() < 0.01  # Post-LN: the norm stays at sqrt(width)
    assert (tmp_path / "t" / "toy.png").is_file()
