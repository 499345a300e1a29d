"""The record of the runs layerprobe.integrations writes during training (LayerMonitor, LayerprobeCallback): no CLI
command, its settings, summary keys, monitor.csv and how report and compare read it."""

from __future__ import annotations

from layerprobe.commands.record import Command
from layerprobe.config import MonitorSettings
from layerprobe.runs.columns import MONITOR
from layerprobe.runs.keys import INTEGER, LIST, MAPPING, RUN, TEXT, Key
from layerprobe.runs.kinds import Kind

SUMMARY = RUN + (
    Key("model", TEXT, "the trained model: its name_or_path, or its class"),
    Key("architecture", TEXT, "the model's class"),
    Key("layers_path", TEXT, "dotted path of the block list measured"),
    Key("num_layers", INTEGER, "blocks in the stack"),
    Key("dataset", TEXT, "the probe corpus (or 'the given probe batches')"),
    Key("tokens", INTEGER, "probe positions measured at each step"),
    Key("seq_len", INTEGER, "probe sequence length"),
    Key("batch_size", INTEGER, "probe sequences per forward"),
    Key("every", INTEGER, "measured every N optimizer steps"),
    Key("steps", LIST, "the steps measured"),
    Key("processes", INTEGER, "processes of the training run (DDP ranks share the probe batches)"),
    Key("device", TEXT, "the device the model trained on"),
    Key("dtype", TEXT, "the model's parameter dtype"),
    Key("crossover_step", INTEGER, "the first measured step from which the deep third's mean d(l, 1) stays below the "
        "shallow third's (null: not below at the last step)", optional=True),
    Key("last", MAPPING, "at the last measured step: shallow and deep thirds' mean d(l, 1), and the late-over-early "
        "ratios of the gradient norm and of the variance"),
    Key("trainer", MAPPING, "the HF Trainer's max_grad_norm and gradient_accumulation_steps (LayerprobeCallback)",
        required=False),
    Key("lightning", MAPPING, "Lightning's gradient_clip_val and accumulate_grad_batches (LayerprobeLightningCallback)",
        required=False),
    Key("placement", TEXT, "where the blocks normalize, read from one forward: pre, post, peri (sandwich), mix or "
        "unknown"),
    Key("placement_by_layer", LIST, "the placement of each block"),
)
READ = f"{__name__}.read:"  # read.py: its findings, per-layer table and comparer, imported on first use
KIND = Kind("monitor", (("monitor.csv", True),), "monitor.png", "During training: d(l, 1) and gradient norms by step",
            (("normalization", "placement"), ("dataset", "dataset"), ("probe tokens", "tokens"), ("every", "every"),
             ("deep below shallow from step", "crossover_step")),
            READ + "monitor_findings", READ + "monitor_table", READ + "compare_monitor",
            compared_with=("angular", "gradnorm", "variance"),
            column_tolerance=(("norm", "variance"), ("variance", "variance")))
COMMAND = Command("monitor", settings=MonitorSettings, kind=KIND, summary=SUMMARY, tables={"monitor.csv": MONITOR},
                  exports={"LayerMonitor": "layerprobe.integrations.monitor:LayerMonitor",  # a plain loop
                           "LayerprobeCallback": "layerprobe.integrations.hf_trainer:LayerprobeCallback"})  # HF Trainer
