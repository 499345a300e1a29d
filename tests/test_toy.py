"""The toy residual-MLP model: statistics against direct computations, placements against their formulas; toy
--overwrite of another command's run refused before anything is measured (the replay after round 5, issue 47).
Default tier: the toy is a torch model."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.metrics.stats import effective_rank
from layerprobe.commands.toy.run import ToyModel, measure_toy as measure
from layerprobe.config import ToyConfig
from layerprobe.errors import RunError
from layerprobe.metrics.stats import power_law

from tests.helpers import DEMO_REFERENCE, assert_error

runner = CliRunner()


def test_effective_rank_of_known_spectra():
    # h = Q diag(3, 2, 1) V^T with zero-mean orthonormal columns Q: singular values 3, 2, 1 by construction,
    # so p = (1/2, 1/3, 1/6) and the effective rank is exp(H(p)) = 2.749...
    g = torch.Generator().manual_seed(0)
    raw = torch.randn(50, 3, generator=g, dtype=torch.float64)
    q = torch.linalg.qr(raw - raw.mean(0))[0]
    v = torch.linalg.qr(torch.randn(6, 3, generator=g, dtype=torch.float64))[0]
    h = q @ torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)) @ v.T  # (50 samples, width 6)
    p = [1 / 2, 1 / 3, 1 / 6]
    assert effective_rank(h) == pytest.approx(math.exp(-sum(x * math.log(x) for x in p)), rel=1e-9)
    assert effective_rank(h + 5.0) == pytest.approx(effective_rank(h), rel=1e-9)  # a shift is centered away
    assert effective_rank(q @ v.T) == pytest.approx(3.0, rel=1e-9)  # equal singular values: the rank itself
    line = torch.randn(10, 1, generator=g, dtype=torch.float64) @ torch.randn(1, 5, generator=g, dtype=torch.float64)
    assert effective_rank(line) == pytest.approx(1.0, abs=1e-6)


def test_power_law_recovers_exact_slopes():
    layers = list(range(10, 101))
    fit = power_law(layers, [3.0 * l ** 0.5 for l in layers])
    assert fit["slope"] == pytest.approx(0.5, abs=1e-12) and fit["ci_low"] <= 0.5 <= fit["ci_high"]
    assert power_law(layers, [2.0 / l for l in layers])["slope"] == pytest.approx(-1.0, abs=1e-12)
    assert power_law([1, 2], [1, 2]) is None


@pytest.mark.parametrize("placement", ["pre", "post", "lns", "deepnorm", "sandwich"])
def test_toy_blocks_follow_their_formulas(placement):
    config = ToyConfig(depth=3, width=8, samples=5)
    model = ToyModel(placement, config, alpha=0.7)
    x = torch.randn(5, 8)
    states = model.forward(x)

    def ln(h):
        return (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)

    h = x
    for l in range(3):
        def f(v):
            return 0.7 * (torch.relu(v @ model.fc1[l].T) @ model.fc2[l].T)
        if placement == "pre":
            h = h + f(ln(h))
        elif placement == "post":
            h = ln(h + f(h))
        elif placement == "lns":
            h = h + f(ln(h) / math.sqrt(l + 1))
        elif placement == "deepnorm":
            h = ln((2 * 3) ** 0.25 * h + f(h))
        else:
            h = h + ln(f(ln(h)))
        got = states[l + 1]  # torch.testing.assert_close's check for float32, without its import of torch.distributed
        assert got.shape == h.shape and got.dtype == h.dtype  # (and sympy: ~1 s, most of this file's time)
        assert torch.allclose(got, h, rtol=1.3e-6, atol=1e-5), float((got - h).abs().max())


def test_measure_matches_direct_computation():
    config = ToyConfig(depth=4, width=16, samples=64)
    model = ToyModel("mix", config, alpha=1.0)
    assert model.placements == ["post", "pre", "pre", "pre"]  # floor(0.25 * 4) = 1
    x = torch.randn(64, 16, dtype=torch.float32)
    readout = torch.randn(16) / 4
    rows = pd.DataFrame(measure(model, x, readout))
    states = model.forward(x)
    grads = torch.autograd.grad((states[-1] @ readout).mean(), model.fc1 + model.fc2)
    for l in range(1, 5):
        row = rows[rows.layer == l].iloc[0]
        h = states[l].detach().double().numpy()
        assert row.hidden_norm == pytest.approx(np.linalg.norm(h, axis=1).mean(), rel=1e-9)
        h0 = x.double().numpy()
        cos0 = (h * h0).sum(1) / np.linalg.norm(h, axis=1) / np.linalg.norm(h0, axis=1)
        assert row.cos_input == pytest.approx(cos0.mean(), rel=1e-6)
        if l < 4:
            n = states[l + 1].detach().double().numpy()
            cos = (h * n).sum(1) / np.linalg.norm(h, axis=1) / np.linalg.norm(n, axis=1)
            assert row.cos_next == pytest.approx(cos.mean(), rel=1e-6)
        else:
            assert math.isnan(row.cos_next)
        g = math.sqrt(float(grads[l - 1].double().pow(2).sum() + grads[4 + l - 1].double().pow(2).sum()))
        assert row.grad_norm == pytest.approx(g, rel=1e-6)



@pytest.mark.parametrize("args,needle", [
    (["--norm", "pre,middle"], "middle"),
    (["--branch-scale", "0"], "--branch-scale"),
    (["--alpha", "x"], "--branch-scale"),  # the old name still works
    (["--depth", "1"], "--depth"),
    (["--mix-alpha", "2"], "--mix-alpha"),
])
def test_toy_bad_input(args, needle, tmp_path):
    result = runner.invoke(app, ["toy", *args, "--out", str(tmp_path / "t")])
    assert_error(result, needle)


def test_toy_overwrite_of_another_commands_run_is_refused_before_measuring(tmp_path):
    from layerprobe.commands.toy.run import run_toy

    gradnorm = tmp_path / "gradnorm"
    shutil.copytree(DEMO_REFERENCE / "gradnorm", gradnorm)
    manifest = json.loads((gradnorm / "manifest.json").read_text())
    manifest["files"] = sorted(p.name for p in gradnorm.iterdir())
    (gradnorm / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(p.name for p in gradnorm.iterdir())
    measured = []
    with pytest.raises(RunError, match="holds a gradnorm run, not a toy run"):
        run_toy(ToyConfig(depth=2, width=2, samples=2, out=str(gradnorm), overwrite=True),
                lambda *args: measured.append(args))
    assert measured == [] and sorted(p.name for p in gradnorm.iterdir()) == before
