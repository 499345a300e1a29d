"""`layerprobe angular`: the angular distance between block inputs in one pass (run.py), and its record: settings,
run-folder name, summary keys, CSV columns and how report and compare read its runs."""

from __future__ import annotations

from layerprobe.commands.record import Command, named
from layerprobe.config import AngularConfig
from layerprobe.runs.columns import LAYERS, Column
from layerprobe.runs.keys import CORPUS, INTEGER, LIST, MODEL, NUMBER, RUN, TEXT, Key
from layerprobe.runs.kinds import Kind, Tolerance

ANGULAR = (  # angular.csv: one row per block of n layers starting at l
    Column("layer", "l, the first block", key=True, whole=True),
    Column("n", "blocks spanned", key=True, whole=True),
    Column("distance", "d(x_l, x_l+n) = arccos(cos)/pi, mean over positions", "[0, 1]", always=True),
    Column("tokens", "positions measured", "positions", whole=True),
)
SUMMARY = RUN + MODEL + CORPUS + (
    Key("batch_size", INTEGER, "sequences per forward"),
    Key("positions", TEXT, "all tokens, or the last of each sequence"),
    Key("tokens_requested", INTEGER, "--tokens"),
    Key("measured_positions", INTEGER, "positions in the distance sums"),
    Key("rank_tokens", INTEGER, "positions in the effective-rank sample"),
    Key("processes", INTEGER, "processes the pass ran on"),
    Key("peak_gpu_memory_gib", NUMBER, "peak GPU memory", optional=True),
    Key("logit_lens_tokens", INTEGER, "positions of the logit-lens column (0: none)"),
    Key("prune_first", LIST, "per block size n: the block (layer, layers, distance) with the smallest d(l, n)"),
)
READ = f"{__name__}.read:"  # read.py: its findings, per-layer table, overlay, comparer, heatmaps, imported on first use
KIND = Kind("angular", (("angular.csv", True), ("layers.csv", True)), "heatmap.png",
            "Angular distance between block inputs",
            (("normalization", "placement"), ("dataset", "dataset"), ("tokens", "tokens"), ("positions", "positions")),
            READ + "angular_findings", READ + "angular_table", READ + "compare_angular",
            overlay=READ + "angular_by_depth", config_class=AngularConfig, shared_plots=READ + "shared_heatmaps",
            overlay_axis=("d(l, 1)", "Angular distance of each layer, by relative depth"), check=READ + "whole_grid",
            tolerances=(Tolerance("angular", 0.02, "absolute change of any d(l, n); monitor runs: of each d(l, 1) at "
                                  "each measured step; every other distance, cosine or share on a fixed range "
                                  "layers.csv and monitor.csv declare (d(l, 1), Block Influence, cos with x_0, "
                                  "router entropy) alike; counts exactly"),),
            compared_with=("angular", "variance"),
            column_tolerance=tuple((c, "variance") for c in ("norm", "variance", "logit_lens_kl", "effective_rank")))
COMMAND = Command("angular", "layerprobe.cli.angular:angular", "layerprobe.commands.angular.run:run_angular",
                  settings=AngularConfig, kind=KIND, summary=SUMMARY,
                  tables={"layers.csv": LAYERS, "angular.csv": ANGULAR}, folder=named("angular"))
