"""Progress that names what it counts (issue 49 items 6, 8, 11): on the tiny LLaMA, every stage label of angular (with
the logit lens), prune and heal --method lstsq and lora says its unit, never counts two things (one total per label),
and heal reports from its first phase (capture, fit, held-out scoring, outputs) to its last."""

from __future__ import annotations

import re

import pytest

from layerprobe.config import AngularConfig, DataOptions, HealConfig, ModelOptions, PruneConfig
from layerprobe.commands.angular.run import run_angular
from layerprobe.commands.heal.run import run_heal
from layerprobe.commands.prune.run import run_prune

UNITS = re.compile(r"\b(tokens|positions|batches|variants|steps|updates|files|runs|layers|sets|requests)\b")


def recorded(runner, config) -> list[tuple[str, int, int]]:
    calls: list[tuple[str, int, int]] = []
    runner(config, lambda stage, done, total: calls.append((stage, done, total)))
    return calls


def check_labels(calls: list[tuple[str, int, int]]) -> None:
    totals: dict[str, set] = {}
    for stage, done, total in calls:
        totals.setdefault(stage, set()).add(total)
        assert 0 <= done <= total, (stage, done, total)
    assert all(len(t) == 1 for t in totals.values()), totals  # one label, one thing counted
    assert all(UNITS.search(stage) for stage in totals), sorted(totals)  # each label names its unit


def data(tokens: int = 256) -> DataOptions:
    return DataOptions("builtin", tokens=tokens, seq_len=32, batch_size=4)


def test_angular_and_prune_labels_name_what_they_count(model_dirs, tmp_path):
    model = ModelOptions(str(model_dirs["llama"]), device="cpu")
    angular = recorded(run_angular, AngularConfig(model=model, data=data(), lens_tokens=64, out=str(tmp_path / "a")))
    check_labels(angular)
    stages = {stage for stage, _, _ in angular}
    assert "tokens" in stages and "logit lens (positions)" in stages  # two things, two labels
    prune = recorded(run_prune, PruneConfig(task="kl", model=model, data=data(), out=str(tmp_path / "p")))
    check_labels(prune)


@pytest.mark.parametrize("method", ["lstsq", "lora"])
def test_heal_reports_every_phase_from_the_start(method, model_dirs, tmp_path):
    extra = {"calibration_tokens": 512} if method == "lstsq" else {"steps": 2, "eval_every": 2}
    config = HealConfig(model=ModelOptions(str(model_dirs["llama"]), device="cpu"), data=data(), remove="1",
                        method=method, gain=False, out=str(tmp_path / method), **extra)
    calls = recorded(run_heal, config)
    check_labels(calls)
    stages = list(dict.fromkeys(stage for stage, _, _ in calls))  # in the order first reported
    if method == "lstsq":
        assert stages == ["replaced runs (captured, fitted and folded)",
                          "capture of activations (calibration batches, 4 per run)", "held-out scores (batches)",
                          "heal outputs (files written)"], stages
    else:
        assert stages == ["held-out scores before healing (batches)", "heal steps (AdamW updates)",
                          "held-out scores after healing (batches)", "heal outputs (files written)",
                          "held-out scores of the unpruned model (batches)"], stages
    first = {stage: min(i for i, c in enumerate(calls) if c[0] == stage) for stage in stages}
    assert all(calls[i][1] == 0 for i in first.values())  # every phase shows itself before its first item is done
    assert calls[-1] == ("heal outputs (files written)", 3, 3)
