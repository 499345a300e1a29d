"""Figures and findings as a researcher reads them (issue 17): checked on the figure objects and on hand-computed
numbers, not by looking."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from layerprobe.metrics.stats import spearman_interval
from layerprobe.plots.bars import prune_bars
from layerprobe.plots.heatmap import angular_heatmap
from layerprobe.report.findings import conflicts, findings
from layerprobe.runs.read import Run


DEMO = Path(__file__).parent / "data" / "demo"


def distances(num_layers=4):
    rng = np.random.default_rng(0)
    d = np.zeros((num_layers + 1, num_layers + 1))
    for i in range(num_layers + 1):
        for j in range(i + 1, num_layers + 1):
            d[i, j] = d[j, i] = 0.3 + 0.05 * (j - i) + 0.01 * rng.random()
    return d


def test_heatmap_scales_to_the_data_and_labels_are_readable():
    d = distances()
    fig = angular_heatmap(d, "t")
    image = fig.axes[0].images[0]
    upper = [d[i, j] for i in range(5) for j in range(i + 1, 5)]
    assert image.get_clim() == pytest.approx((min(upper), max(upper)))  # not from 0
    texts = {t.get_text(): t.get_color() for t in fig.axes[0].texts}
    assert f"{max(upper):.3f}" in texts and texts[f"{max(upper):.3f}"] == "white"  # the darkest cell
    assert texts[f"{min(upper):.3f}"] == "black"  # the lightest (yellow) cell
    assert "shared" not in fig.axes[1].get_ylabel()  # this run's own range, on the bar's ticks
    shared = angular_heatmap(d, "t", limits=(0.1, 0.9))
    assert shared.axes[0].images[0].get_clim() == (0.1, 0.9) and "shared scale" in shared.axes[1].get_ylabel()
    # the colour bar's label fits beside the bar (it was twice the bar's height and padded the figure)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for figure in (fig, shared):
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        label = figure.axes[1].yaxis.label.get_window_extent(canvas.get_renderer())
        bar = figure.axes[1].get_window_extent(canvas.get_renderer())
        assert label.height <= bar.height


def test_prune_plot_zeros_align_and_nothing_covers_the_axes():
    delta = np.array([-0.2, 0.05, 0.07, 0.03, -0.09, -0.24])
    fig = prune_bars([str(i) for i in range(6)], delta, "acc", "m: task", np.array([0.17, 0.17, 0.17, 0.18, 0.22, 0.31]),
                     0.66, {"d(l, 1)": 0.66, "Block Influence": 0.6})
    fig.canvas.draw()
    ax, twin = fig.axes
    zero_left = ax.transData.transform((0, 0))[1]
    zero_right = twin.transData.transform((0, 0))[1]
    assert zero_left == pytest.approx(zero_right, abs=0.5)  # the same pixel row
    box = ax.get_window_extent()
    legend = fig.legends[0].get_window_extent()
    assert legend.y1 <= box.y0  # below the axes, over neither bars nor line
    assert all(text.get_window_extent().y1 <= box.y0 for text in fig.texts)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("x^{\\ell+1}" in label for label in labels)  # n = 1, as measured
    assert min(twin.get_yticks()) >= 0


def test_spearman_interval_by_hand():
    # rho 0.66 over 6 layers: z = atanh(0.66) = 0.7928, se = sqrt(1.06 / 3) = 0.5944, 1.96 se = 1.1650
    low, high = spearman_interval(0.66, 6)
    assert low == pytest.approx(math.tanh(0.79281 - 1.16504), abs=1e-4)
    assert high == pytest.approx(math.tanh(0.79281 + 1.16504), abs=1e-4)
    assert spearman_interval(0.9, 4) is None


def run_of(command, summary, **tables):
    return Run(folder=None, command=command, summary=summary, manifest={}, tables=tables)


def test_conflicting_signals_are_named():
    angular = run_of("angular", {"model": "m"}, angular=pd.DataFrame(
        {"layer": [0, 1, 2, 3], "n": [1] * 4, "distance": [0.10, 0.30, 0.20, 0.40], "tokens": 1}))
    prune = run_of("prune", {"model": "m", "metric": "kl", "higher_is_better": False, "task": "kl", "block": 1},
                   prune=pd.DataFrame({"layer": [0, 1, 2, 3], "metric": "kl", "delta": [5.0, 0.1, 0.2, 0.3]}))
    found = conflicts([angular, prune])
    assert len(found) == 1 and ("m: layer 0 (d(l, 1) = 0.100, rank 1 of 4) is among the 2 layers that change the "
                                "representation least (angular) yet among the 2 costliest to remove") in found[0]
    assert "what this layer does" in found[0] and "(s)" not in found[0]
    agree = run_of("prune", {"model": "m", "metric": "kl", "higher_is_better": False, "task": "kl", "block": 1},
                   prune=pd.DataFrame({"layer": [0, 1, 2, 3], "metric": "kl", "delta": [0.1, 5.0, 0.2, 6.0]}))
    assert conflicts([angular, agree]) == []


def test_least_and_most_important_never_overlap(model_dirs, tmp_path):
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import DataOptions, ModelOptions, PruneConfig

    run = run_prune(PruneConfig(task="kl", model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                                data=DataOptions("builtin", tokens=128, seq_len=32, batch_size=4), out=str(tmp_path / "r")))
    least, most = run.summary["least_important"], run.summary["most_important"]
    assert len(least) == len(most) == 2 and not set(least) & set(most)


def test_gradnorm_figure_fits_the_page_and_tells_placements_apart():
    from layerprobe.plots.gradnorm import gradnorm_figure
    from layerprobe.commands.gradnorm.read import gradnorm_table

    rows, variance = [], []
    for norm, scale in (("pre", 2.0), ("post", 0.4), ("mix", 0.4)):  # mix on top of post, as at init
        for layer in range(4):
            for kind in ("params", "input"):
                rows.append({"norm": norm, "step": 0, "layer": layer, "kind": kind, "module": "block",
                             "grad_norm": scale / (layer + 1), "std": 0.01})
            variance.append({"norm": norm, "step": 0, "layer": layer, "variance": 0.5 + 0.1 * layer})
    table, variance = pd.DataFrame(rows), pd.DataFrame(variance)
    fig = gradnorm_figure(table, variance, {"model": "m", "seeds": 2, "batches": 2})
    assert fig.get_figwidth() <= 11
    markers = {line.get_label(): line.get_marker() for line in fig.axes[2].get_lines()}
    assert len({markers["pre"], markers["post"], markers["mix"]}) == 3
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[2].yaxis.get_ticklabels(which="both") if t.get_text()]
    assert labels and not any("times" in t or "^" in t for t in labels)  # 0.6, not 6x10^-1
    wide = gradnorm_table(run_of("gradnorm", {}, gradnorm=table))
    assert list(wide.columns) == ["layer", "pre: param grad norm", "post: param grad norm", "mix: param grad norm"]


def test_a_hybrids_layers_by_kind_in_the_prune_findings():
    """Six layers, mamba and attention alternating, the mamba ones cheap: the finding counts the two cheapest as
    mamba and gives each kind's median dP (by hand: mamba 0.02, attention 0.5)."""
    from layerprobe.commands.prune.read import prune_findings

    table = pd.DataFrame({"layer": range(6), "block": 1, "removed": [str(i) for i in range(6)], "metric": "kl",
                          "baseline": 0.0, "pruned": [0.01, 0.4, 0.02, 0.5, 0.03, 0.6],
                          "delta": [0.01, 0.4, 0.02, 0.5, 0.03, 0.6], "layer_type": ["mamba", "attention"] * 3})
    run = run_of("prune", {"model": "m", "metric": "kl", "higher_is_better": False, "block": 1}, prune=table)
    line = next(line for line in prune_findings(run) if line.startswith("By kind"))
    assert "of the 2 cheapest to remove, 2 mamba" in line
    assert "mamba +0.02 (3 layers), attention +0.5 (3 layers)" in line


def test_a_hybrids_layers_by_kind_in_the_angular_findings():
    angular = pd.DataFrame({"layer": range(4), "n": 1, "distance": [0.05, 0.30, 0.07, 0.20], "tokens": 1})
    layers = pd.DataFrame({"layer": range(5), "layer_type": ["mamba", "attention", "mamba", "attention", None]})
    run = run_of("angular", {"model": "m"}, angular=angular, layers=layers)
    line = next(line for line in findings(run) if line.startswith("By kind"))
    assert line == ("By kind of layer, median d(l, 1): mamba 0.060 (2 layers), attention 0.250 (2 layers); the mamba "
                    "layers change the representation least.")


def test_a_log_cost_axis_keeps_ticks_where_the_typical_bars_are():
    from layerprobe.plots.bars import prune_bars

    delta = np.array([40000.0, 400.0, 30.0] + [3.0 + i % 5 for i in range(27)])  # SmolLM2's ppl dP, in shape
    fig = prune_bars([str(i) for i in range(30)], delta, "ppl", "t")
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    shown = [t for t in ax.get_yticks() if low <= t <= high]
    assert ax.get_yscale() == "symlog" and any(0 < t <= 10 for t in shown)  # a tick among the typical bars
    typical = float(np.median(delta))
    assert any(typical <= t <= 5 * typical for t in shown)


def test_a_curve_of_a_zero_baseline_draws_no_unpruned_line_and_keeps_its_legend_off_the_axes():
    import pandas as pd

    from layerprobe.plots.curve import curve_plot

    table = pd.DataFrame({"strategy": ["angular"] * 3, "k": [1, 2, 3], "fraction": [0.1, 0.2, 0.3],
                          "score": [0.05, 0.3, 2.0], "metric": ["kl"] * 3})
    fig = curve_plot(table, "kl", 0.0, None, 0.2231, "t")
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1  # under the axes, not over the tolerance line
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any(text.startswith("unpruned") for text in labels) and any("tolerance" in t for t in labels)
    accuracy = table.assign(score=[0.6, 0.5, 0.3], metric="acc")
    labels = [t.get_text() for t in curve_plot(accuracy, "acc", 0.62, 0.25, 0.589, "t").legends[0].get_texts()]
    assert "unpruned (0.62)" in labels and "chance (0.25)" in labels


def test_the_heal_figure_marks_where_healing_starts_and_the_unpruned_models_ppl():
    from layerprobe.plots.heal import heal_plot

    table = pd.DataFrame({"step": [0, 1, 2], "loss": [None, 3.0, 2.5], "lr": [0.0, 1e-4, 1e-4],
                          "heldout_ppl": [47.0, None, 21.0], "heldout_kl": [0.9, None, 0.7]})  # as heal.csv
    _, ppl_ax, kl_ax = heal_plot(table, "t", unpruned_ppl=19.2).axes
    flat = {line.get_label(): line.get_ydata()[0] for line in ppl_ax.lines}
    assert flat["before healing"] == 47.0 and flat["unpruned model"] == 19.2
    assert ppl_ax.get_ylim()[0] < 19.2  # the floor is inside the panel
    assert "unpruned model" not in [line.get_label() for line in kl_ax.lines]  # the kl's floor is 0 by definition
    assert "unpruned model" not in [line.get_label() for line in heal_plot(table, "t").axes[1].lines]


# ---- issue 39, item 7: what a figure or a line of text says is true and explained where it is read -------------


def test_a_log_cost_axis_says_so_and_writes_the_values_it_compresses():
    delta = np.array([43323.0, 401.0, 27.0] + [3.0 + i % 5 for i in range(26)] + [535.0])
    ax = prune_bars([str(i) for i in range(30)], delta, "ppl", "t").axes[0]
    assert "log above" in ax.get_ylabel() and ax.get_ylabel().startswith("$\\Delta P$ (ppl")
    written = {t.get_text().strip() for t in ax.texts}
    edge = next(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":")  # where the log part starts
    assert f"linear to {edge:g}, log above" in ax.get_ylabel()
    assert written == {f"{d:+,.0f}" for d in delta if d > edge} >= {"+43,323", "+401", "+535"}  # the log part's bars
    low, high = ax.get_ylim()
    assert high > 43323 and low == 0  # every value written inside the axes


def test_a_linear_cost_axis_has_a_plain_label():
    ax = prune_bars([str(i) for i in range(6)], np.array([0.1, 0.2, 0.15, 0.3, 0.2, 0.25]), "kl", "t").axes[0]
    assert ax.get_ylabel() == "$\\Delta P$ (kl)" and not ax.texts


def test_the_heatmap_says_what_its_red_boxes_are():
    fig = angular_heatmap(distances(), "t")
    boxes = [p for p in fig.axes[0].patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert len(boxes) == 4  # one per block size
    assert any(t.get_text().startswith("Red box: the smallest distance of each block size") for t in fig.texts)


def test_every_heal_panel_has_a_unit_and_starts_at_its_floor():
    from layerprobe.plots.heal import heal_plot

    table = pd.DataFrame({"step": [0, 1, 2], "loss": [None, 3.0, 2.5], "lr": [0.0, 1e-4, 1e-4],
                          "heldout_ppl": [47.0, None, 21.0], "heldout_kl": [0.917, None, 0.716]})
    loss_ax, ppl_ax, kl_ax = heal_plot(table, "t", unpruned_ppl=19.2).axes
    assert "nats" in loss_ax.get_ylabel() and ppl_ax.get_ylabel() == "perplexity" and "nats" in kl_ax.get_ylabel()
    assert kl_ax.get_ylim()[0] == 0.0 and ppl_ax.get_ylim()[0] == 1.0  # 0.72-0.92 is not drawn as the whole range


def test_layers_table_names_its_last_row_as_the_last_blocks_output():
    from layerprobe.commands.angular.read import angular_table
    from layerprobe.runs.read import load_run

    table = angular_table(load_run(DEMO / "angular"))  # MiniLM: 6 blocks, 7 block inputs x_0..x_6
    assert list(table["layer"]) == ["0", "1", "2", "3", "4", "5", "6 (output of block 5)"]
    assert table.iloc[-1].isna().any() and not table.iloc[:-1].drop(columns="layer").isna().any().any()


def test_the_report_title_names_every_model(tmp_path):
    from layerprobe.report.page import report_runs

    report = report_runs([str(DEMO)], str(tmp_path / "page"))
    first = (tmp_path / "page" / "report.md").read_text().splitlines()[0]
    assert first == "# layerprobe report: gemma3, llama-71m, minilm, smollm2", first
    assert report is not None


def test_messages_use_an_before_a_vowel_and_speeds_keep_their_digits():
    from layerprobe.cli.export import _speed
    from layerprobe.errors import RunError
    from layerprobe.runs.compare import compare_runs
    from layerprobe.runs.read import load_run

    with pytest.raises(RunError, match="cannot compare an angular run with a prune run"):
        compare_runs(load_run(DEMO / "angular"), load_run(DEMO / "prune-drift"), {}, None)
    assert [_speed(v) for v in (2.93, 3.41, 56.74, 1234.4)] == ["2.93", "3.41", "56.7", "1,234"]


def test_the_overlay_legend_sits_beside_the_lines():
    from layerprobe.plots.overlay import overlay_figure

    series = [(f"run {i}", list(range(10)), list(np.linspace(0, 1, 10)[::(-1) ** i]), 10) for i in range(4)]
    fig = overlay_figure(series, "y", "t")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1  # right of the axes
