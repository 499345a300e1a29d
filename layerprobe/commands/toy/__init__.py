"""`layerprobe toy`: the residual-MLP depth model for every normalization placement (run.py), and its record."""

from __future__ import annotations

from layerprobe.commands.record import Command, named
from layerprobe.config import ToyConfig
from layerprobe.runs.columns import Column
from layerprobe.runs.keys import INTEGER, LIST, MAPPING, RUN, TEXT, Key
from layerprobe.runs.kinds import Kind

TOY = (  # toy.csv: the residual-MLP model by depth
    Column("norm", "the normalization placement", key=True, number=False),
    Column("alpha", "the branch scale", key=True),
    Column("layer", "block l", key=True, whole=True),
    Column("hidden_norm", "mean ||h_l||"),
    Column("cos_next", "mean cos(h_l, h_l+1); empty for the last block", gaps=True),
    Column("cos_input", "mean cos(h_l, h_0)"),
    Column("effective_rank", "effective rank of h_l"),
    Column("grad_norm", "gradient norm of block l's parameters"),
)
SUMMARY = RUN + (
    Key("model", TEXT, "toy"),
    Key("num_layers", INTEGER, "residual blocks"),
    Key("width", INTEGER, "hidden size"),
    Key("samples", INTEGER, "Gaussian inputs"),
    Key("alphas", LIST, "branch scales"),
    Key("seed", INTEGER, "seed"),
    Key("fits", MAPPING, "per placement and alpha: log-log slopes (with 95% intervals) over the deep half"),
    Key("expected_pre_ln", MAPPING, "the slopes a Pre-LN random walk predicts"),
)
READ = f"{__name__}.read:"  # read.py: its findings and per-layer table, imported on first use
KIND = Kind("toy", (("toy.csv", True),), "toy.png", "Toy residual-MLP model (||h_l|| by layer)",
            (("width", "width"), ("samples", "samples"), ("alphas", "alphas")),
            READ + "toy_findings", READ + "toy_table", config_class=ToyConfig)
COMMAND = Command("toy", "layerprobe.cli.toy:toy", "layerprobe.commands.toy.run:run_toy", settings=ToyConfig,
                  kind=KIND, summary=SUMMARY, tables={"toy.csv": TOY}, folder=named("toy"))
