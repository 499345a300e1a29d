"""A CSV column, a task-free metric and a curve strategy, each added by its record and its own code alone (issue 52):
the dummy package (tests/data/dummy_command) declares them and no module of layerprobe names them, yet the run
writes the column, docs/outputs.md lists it, `prune --task` scores the metric with its own tolerance, and
--strategies, export's --strategy and the curve plot take the strategy. (tests/test_curve.py runs a curve with both
on a tiny model.)"""

from __future__ import annotations

import ast

import pytest
import torch

from layerprobe.errors import ConfigError
from tests.helpers import package_nodes


@pytest.fixture
def added():
    """The dummy's metric and strategy registered (one line each), and removed after."""
    from layerprobe.evaluation.metric import METRICS, register_metric
    from layerprobe.strategies import STRATEGIES, register_strategy
    from tests.data.dummy_command import METRIC, STRATEGY

    register_metric(METRIC)
    register_strategy(STRATEGY)
    yield METRIC, STRATEGY
    METRICS.pop(METRIC.name, None)
    STRATEGIES.pop(STRATEGY.name, None)


def test_no_module_of_layerprobe_names_the_added_records():
    """What the additions touch: their records and their own functions, in the dummy package only."""
    names = {"absdiff", "front", "squared"}
    found = [f"{where}:{node.lineno} {node.value!r}" for where, nodes in package_nodes() for node in nodes
             if isinstance(node, ast.Constant) and node.value in names]
    assert not found, "\n".join(found)


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


def test_the_added_metric_is_scored_by_its_own_function_and_tolerance(added):
    from layerprobe.commands.prune.sweeps import task_kind
    from layerprobe.evaluation.metric import has_baseline, tolerance_edge, within
    from layerprobe.evaluation.taskfree import add_baseline, metric_rows, Sums

    torch.manual_seed(0)
    original, pruned, ids = torch.randn(2, 3, 5), torch.randn(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
    total, count, rows = metric_rows("absdiff", original, pruned, ids)
    by_hand = [[sum(abs(float(pruned[s, t, d]) - float(original[s, t, d])) / 5 for d in range(5)) for t in range(3)]
               for s in range(2)]  # a plain loop over the entries
    assert count == 6 and total == pytest.approx(sum(map(sum, by_hand)), rel=1e-12)
    assert [r[0] for r in rows] == pytest.approx([sum(r) for r in by_hand], rel=1e-12) and [r[1] for r in rows] == [3, 3]
    sums = Sums()
    add_baseline("absdiff", original, ids, sums)
    assert sums.baseline == [0.0, 0]  # zero_baseline: the model against itself is 0, nothing to score
    assert task_kind("absdiff") == "taskfree" and not has_baseline("absdiff")
    assert tolerance_edge("absdiff", False, 0.0, 0.9) == pytest.approx(0.1)  # its own rule, 1 - keep
    assert within("absdiff", False, 0.0, 0.05, 0.9) and not within("absdiff", False, 0.0, 0.2, 0.9)


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
