"""Library calls leave the process and the model as they found them (STYLE habit 3): no hooks left on any module,
the same blocks, the same logits, grad mode and every parameter's requires_grad as before, no matplotlib backend
switched; and the small statistics helpers against scipy."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import scipy.stats
import torch

import layerprobe.commands.gradnorm.run as gradnorm_run
import layerprobe.commands.probe as probe_module
from layerprobe.commands.angular.run import run_angular
from layerprobe.commands.gradnorm.run import run_gradnorm
from layerprobe.commands.prune.run import run_prune
from layerprobe.config import AngularConfig, DataOptions, GradnormConfig, ModelOptions, PruneConfig
from layerprobe.metrics.stats import spearman


def hooks_on(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


@pytest.fixture
def loaded_models(monkeypatch):
    """Every model a command loads, kept for inspection after the call."""
    seen = []

    def keep(load):
        def wrapped(*args, **kwargs):
            loaded = load(*args, **kwargs)
            seen.append(loaded)
            return loaded
        return wrapped

    monkeypatch.setattr(probe_module, "load_model", keep(probe_module.load_model))
    monkeypatch.setattr(gradnorm_run, "load_model", keep(gradnorm_run.load_model))
    return seen


def snapshot(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids)
    first = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return ([name for name, _ in model.named_modules()], {n: p.requires_grad for n, p in model.named_parameters()},
            first.clone())


@pytest.mark.parametrize("grad_mode", [True, False])
@pytest.mark.parametrize("command", ["angular", "prune-kl", "prune-drift", "gradnorm"])
def test_library_calls_restore_state(command, grad_mode, loaded_models, model_dirs, corpus_file, tmp_path):
    arch = "bert" if command == "prune-drift" else "llama"
    model = ModelOptions(str(model_dirs[arch]), dtype="float32", device="cpu")
    data = DataOptions(str(corpus_file), tokens=256, seq_len=32, batch_size=2)
    backend = matplotlib.get_backend()
    torch.set_grad_enabled(grad_mode)
    try:
        if command == "angular":
            run_angular(AngularConfig(model=model, data=data, out=str(tmp_path / "a")))
        elif command.startswith("prune"):
            run_prune(PruneConfig(task=command.split("-")[1], model=model, data=data, out=str(tmp_path / "p")))
        else:
            run_gradnorm(GradnormConfig(model=model, seeds=1, batches=1, data=DataOptions(str(corpus_file), tokens=0,
                                                                                            seq_len=32, batch_size=2), out=str(tmp_path / "g")))
        assert torch.is_grad_enabled() == grad_mode
    finally:
        torch.set_grad_enabled(True)
    assert matplotlib.get_backend() == backend
    (loaded,) = loaded_models
    assert hooks_on(loaded.model) == 0
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    names, requires, out = snapshot(loaded.model, ids)
    fresh = type(loaded.model).from_pretrained(model_dirs[arch]).eval()
    fresh_names, fresh_requires, fresh_out = snapshot(fresh, ids)
    assert names == fresh_names and requires == fresh_requires
    torch.testing.assert_close(out, fresh_out, rtol=0, atol=0)


def test_spearman_matches_scipy():
    rng = np.random.default_rng(0)
    for n in (3, 6, 30):
        x, y = rng.normal(size=n), rng.normal(size=n)
        assert spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=1e-12)
        tied_x, tied_y = np.round(x), np.round(y * 2)  # ties take average ranks in both
        if np.std(tied_x) > 0 and np.std(tied_y) > 0:
            assert spearman(tied_x, tied_y) == pytest.approx(scipy.stats.spearmanr(tied_x, tied_y).statistic, abs=1e-12)
    assert spearman([1.0, 2.0], [2.0, 1.0]) is None  # fewer than 3 points
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # a constant: undefined
