"""A CSV column, a task-free metric and a curve strategy, each added by its record and its own code alone (issue 52):
the dummy package (tests/data/dummy_command) declares them and no module of layerprobe names them (checked in
tests/test_source_scans.py), yet the run writes the column, docs/outputs.md lists it, `prune --task` takes the
metric where its record says, and --strategies, export's --strategy and the curve plot take the strategy. (The metric scored on tensors:
tests/test_added_metric.py; a curve with both on a tiny model: tests/test_curve.py. The `added` fixture:
tests/conftest.py.)"""

from __future__ import annotations

import pytest

from layerprobe.errors import ConfigError


def test_the_added_column_is_written_and_documented(tmp_path, monkeypatch):
    from layerprobe.commands import COMMANDS, register
    from layerprobe.runs.columns import TABLES
    from layerprobe.runs.kinds import KINDS
    from layerprobe.runs.schema import SUMMARIES, render_outputs
    from tests.data.dummy_command import COMMAND, DummyConfig, run_dummy

    register(COMMAND)
    monkeypatch.chdir(tmp_path)
    try:
        run = run_dummy(DummyConfig(value=3.0, out="d"))
        assert run.dummy["squared"].tolist() == [0.0, 9.0, 36.0, 81.0]  # (3 l)^2 by hand
        assert "squared" in (tmp_path / "d" / "dummy.csv").read_text().splitlines()[0].split(",")
        assert "| `squared` | (value x l) squared |" in render_outputs()
    finally:
        for registry, key in ((COMMANDS, "dummy"), (KINDS, "dummy"), (SUMMARIES, "dummy"), (TABLES, "dummy.csv"),
                              (TABLES, "dummy-copy.csv")):
            registry.pop(key, None)


def test_the_added_metric_is_an_option_where_its_record_says(added):
    from layerprobe.config import CurveSettings, PruneConfig
    from layerprobe.settings import validate

    validate(PruneConfig(task="absdiff"), every=True)
    with pytest.raises(ConfigError, match="Unknown --greedy-metric 'absdiff'"):  # not accepted_by RESCORING
        validate(PruneConfig(task="kl", curve=CurveSettings(greedy_metric="absdiff")), every=True)


def test_the_added_strategy_is_a_choice_picks_and_is_drawn(added):
    from layerprobe.commands.prune.curve import Choice, check_strategies, rescoring
    from layerprobe.config import CurveSettings, ExportConfig, ModelOptions, PruneConfig
    from layerprobe.plots.curve import curve_plot
    from layerprobe.settings import validate

    settings = CurveSettings(strategies=("front", "last"))
    validate(PruneConfig(task="kl", curve=settings), every=True)
    validate(ExportConfig(model=ModelOptions("m"), from_curve="c", strategy="front", out="o"), every=True)
    check_strategies(settings)
    assert rescoring(settings) == []  # it picks without scoring: no --greedy-metric in its summary
    _, strategy = added
    assert strategy.pick(Choice(None, 6, 3, None)) == {1: [0], 2: [0, 1], 3: [0, 1, 2]}

    import pandas as pd

    table = pd.DataFrame({"strategy": ["front", "front"], "k": [1, 2], "fraction": [1 / 6, 2 / 6],
                          "score": [0.1, 0.2], "within": [True, False], "healed_score": [float("nan")] * 2})
    figure = curve_plot(table, "absdiff", 0.0, None, 0.1, "title")
    line = next(line for line in figure.axes[0].get_lines() if line.get_label() == "front: first n layers")
    assert line.get_color() == "#8e44ad" and line.get_marker() == "D"  # its record's colour and marker


def test_a_rescoring_strategy_takes_the_greedy_options_by_its_record(added):
    """--greedy-metric and --greedy-ends apply where a chosen strategy's record rescores, whatever its name: the
    dummy's strategy, re-registered with rescores=True, takes them alone; as it is (rescores=False) it refuses them."""
    import dataclasses

    from layerprobe.config import PruneConfig
    from layerprobe.settings import resolve
    from layerprobe.strategies import STRATEGIES, register_strategy

    given = {"task": "kl", "curve": {"strategies": ("front",), "greedy_metric": "ppl", "greedy_ends": "allow"}}
    with pytest.raises(ConfigError, match="--greedy-metric ppl does nothing with --strategies front: it applies only "
                                          "where --strategies is greedy"):
        resolve(PruneConfig, given)
    _, strategy = added
    STRATEGIES.pop(strategy.name)
    register_strategy(dataclasses.replace(strategy, rescores=True))
    config, _ = resolve(PruneConfig, given)
    assert (config.curve.greedy_metric, config.curve.greedy_ends) == ("ppl", "allow")
    with pytest.raises(ConfigError, match="applies only where --strategies is greedy or front"):
        resolve(PruneConfig, {"task": "kl", "curve": {"strategies": ("last",), "greedy_ends": "allow"}})
