"""`layerprobe gradnorm`: per-layer gradient norms at init and in short training, per normalization placement (run.py:
the jobs, measure.py: one gradient pass, outputs.py: the folder), and its record."""

from __future__ import annotations

from layerprobe.commands.record import Command, named
from layerprobe.config import GradnormConfig, TrainSettings
from layerprobe.runs.columns import MONITOR, Column
from layerprobe.runs.keys import INTEGER, LIST, MAPPING, NUMBER, RUN, TEXT, Key
from layerprobe.runs.kinds import Kind, Tolerance

GRADNORM = (  # gradnorm.csv: means over seeds and batches
    Column("norm", "the normalization placement", key=True, number=False),
    Column("layer", "block l", key=True, whole=True),
    Column("kind", "params (the block's parameters) or input (its input's gradient)", key=True, number=False),
    Column("module", "block, or a sub-module of it", key=True, number=False),
    Column("grad_norm", "L2 norm of the gradient, mean over seeds and batches", always=True),
    Column("std", "its standard deviation over seeds and batches (empty where samples = 1: no spread is measured)",
           gaps=True, compare="relative"),
    Column("samples", "seeds x batches averaged", whole=True),
    Column("step", "the training step measured (0: at initialization)", key=True, whole=True),
)
VARIANCE = (  # variance.csv: the output variance of each block
    Column("norm", "the normalization placement", key=True, number=False),
    Column("step", "the training step measured", key=True, whole=True),
    Column("layer", "block l", key=True, whole=True),
    Column("variance", "variance of block l's output over hidden units, mean over seeds and batches"),
    Column("std", "its standard deviation (empty where samples = 1)", gaps=True, compare="relative"),
    Column("samples", "seeds x batches averaged", whole=True),
)
SAMPLES = (  # gradnorm_samples.csv: what gradnorm.csv and variance.csv average, one row per measurement
    Column("norm", "the normalization placement", key=True, number=False),
    Column("seed", "the initialization", key=True, whole=True),
    Column("step", "the training step measured (0: at initialization)", key=True, whole=True),
    Column("batch", "the batch, 0-based", key=True, whole=True),
    Column("layer", "block l", key=True, whole=True),
    Column("kind", "params, input, or variance (the block output's variance; grad_norm empty)", key=True,
           number=False),
    Column("module", "block, or a sub-module of it", key=True, number=False),
    Column("grad_norm", "L2 norm of the gradient on this batch (params and input rows)", optional=True),
    Column("variance", "variance of block l's output over hidden units on this batch (variance rows)", optional=True),
)
LOSS = (  # loss.csv (gradnorm --steps): the training loss of each (placement, seed) per step
    Column("norm", "the normalization placement", key=True, number=False),
    Column("seed", "the initialization", key=True, whole=True),
    Column("step", "the optimizer step", key=True, whole=True),
    Column("loss", "the training loss of that step's batch", "nats"),
)
TRAINING = (  # training.csv (gradnorm --steps): monitor.csv's measurement of each (placement, seed) while it trains
    Column("placement", "the normalization placement (gradnorm.csv's norm)", key=True, number=False),
    Column("seed", "the initialization", key=True, whole=True),
    *MONITOR,
)
SUMMARY = RUN + (
    Key("model", TEXT, "the checkpoint, or the in-house size"),
    Key("arch", TEXT, "in-house size", optional=True),
    Key("dataset", TEXT, "the corpus of the batches"),
    Key("seq_len", INTEGER, "tokens per sequence"),
    Key("batch_size", INTEGER, "sequences per batch"),
    Key("seeds", INTEGER, "initializations per placement"),
    Key("batches", INTEGER, "batches per initialization"),
    Key("device", TEXT, "the device"),
    Key("dtype", TEXT, "the parameter dtype"),
    Key("steps", INTEGER, "training steps"),
    Key("record_steps", LIST, "the steps measured"),
    Key("peak_gpu_memory_gib", NUMBER, "peak GPU memory", optional=True),
    Key("lr", NUMBER, "--steps: peak learning rate", required=False),
    Key("warmup", INTEGER, "--steps: warmup steps", required=False),
    Key("clip", NUMBER, "--steps: gradient clipping", required=False),
    Key("placements", MAPPING, "per placement: late-over-early ratios of parameter and input gradient norms and of the "
        "output variance"),
    Key("final_loss", MAPPING, "--steps: the last step's mean loss per placement", required=False),
    Key("monitor_every", INTEGER, "--steps: training.csv measured every N steps", required=False),
    Key("training", MAPPING, "--steps: per placement (seeds averaged), the step from which the deep third's mean "
        "d(l, 1) stays below the shallow third's (crossover_step, null: not below at the end) and the two "
        "thirds' means at the last step", required=False),
)
READ = f"{__name__}.read:"  # read.py: its findings, per-layer table and comparer, imported on first use
KIND = Kind("gradnorm", (("gradnorm.csv", True), ("variance.csv", False)), "gradnorm.png", "Gradient norms by layer",
            (("arch", "arch"), ("seeds x batches", "{seeds} x {batches}"), ("steps", "steps")),
            READ + "gradnorm_findings", READ + "gradnorm_table", READ + "compare_gradnorm", config_class=GradnormConfig,
            tolerances=(Tolerance("gradnorm", 0.25, "relative change of any block's gradient norm, params or input; "
                                  "monitor runs: at each measured step; every other number its tables declare "
                                  "(training.csv, loss.csv, gradnorm_samples.csv, standard deviations) as a fraction "
                                  "of its own value"),
                        Tolerance("variance", 0.25, "relative change of any block's output variance; angular and "
                                  "monitor runs: of each layer's norm and variance (and angular's logit-lens KL and "
                                  "effective rank) in layers.csv and monitor.csv")),
            column_tolerance=(("variance", "variance"),))
COMMAND = Command("gradnorm", "layerprobe.cli.gradnorm:gradnorm", "layerprobe.commands.gradnorm.run:run_gradnorm",
                  settings=GradnormConfig, kind=KIND, summary=SUMMARY,
                  tables={"gradnorm.csv": GRADNORM, "variance.csv": VARIANCE, "training.csv": TRAINING,
                          "gradnorm_samples.csv": SAMPLES, "loss.csv": LOSS},
                  folder=named("gradnorm"), exports={"TrainSettings": TrainSettings})
