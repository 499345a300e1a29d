"""The finished monitor run: the depth summary (when the deep layers' d(l, 1) falls below the shallow ones'),
monitor.png, summary.json and manifest.json, written through runs/write.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerprobe.commands.monitor import COMMAND
from layerprobe.integrations.measure import isolated, rank_and_size
from layerprobe.metrics.stats import depth_ratio
from layerprobe.metrics.thirds import crossover_step, thirds  # noqa: F401 (also this module's API)
from layerprobe.plots.monitor import monitor_figure
from layerprobe.runs.folder import model_label
from layerprobe.runs.write import RunResult, write_run


def _last(table: Any) -> dict:
    last = table[table["step"] == table["step"].max()]
    blocks = last[last["distance_next"].notna()]
    means = thirds(table).iloc[-1]
    grads = blocks["grad_norm"].dropna().tolist()
    return {"step": int(last["step"].iloc[0]), "shallow_distance": float(means["shallow"]),
            "deep_distance": float(means["deep"]),
            "grad_late_over_early": depth_ratio(grads) if len(grads) == len(blocks) else None,
            "variance_late_over_early": depth_ratio(blocks["variance"].tolist())}


def placement(model: Any, stack: Any) -> dict:
    """Where the blocks normalize (models/norms.py: pre, post, peri, mix or unknown), read from one short forward
    that leaves the model as it was."""
    from layerprobe.models.norms import block_placements, model_placement

    try:
        with isolated(model):
            per_block = block_placements(model, stack)
    except Exception:  # a model whose plain forward needs more than token ids: not read
        per_block = ["unknown"] * len(stack.blocks)
    return {"placement": model_placement(per_block), "placement_by_layer": per_block}


def model_name(model: Any) -> str:
    """How the monitor run names its model: the checkpoint it was loaded from; for a model built from a config
    (training from scratch), its in-house size (llama-71m) or model type and size, never a Python class name."""
    config = getattr(model, "config", None)
    if getattr(config, "name_or_path", ""):
        return str(config.name_or_path)
    from layerprobe.models.inhouse.configuration import size_name

    size = size_name(config) if config is not None else None
    if size is not None:
        return size
    count = sum(p.numel() for p in model.parameters())
    size = f"{count / 1e6:.0f}m" if count >= 1e6 else f"{count / 1e3:.0f}k"
    return f"{getattr(config, 'model_type', None) or type(model).__name__}-{size}"


def write_monitor_run(folder: Path, monitor: Any, seconds: float) -> RunResult:
    """monitor.csv, monitor.png, summary.json, manifest.json of a LayerMonitor's rows."""
    table = monitor.table().sort_values(["step", "layer"]).reset_index(drop=True)
    model = monitor.model
    param = next(model.parameters())
    name = model_name(model)
    crossover = crossover_step(table)
    data = monitor.settings.data
    facts = {"model": name, "architecture": type(model).__name__, "layers_path": monitor.stack.path,
             "num_layers": len(monitor.stack.blocks), "dataset": monitor.dataset,
             "tokens": int(table["tokens"].iloc[0]), "seq_len": data.seq_len, "batch_size": data.batch_size,
             "every": monitor.settings.every, "steps": sorted(int(s) for s in table["step"].unique()),
             "processes": rank_and_size()[1], "device": str(param.device), "dtype": str(param.dtype).removeprefix("torch."),
             "crossover_step": crossover, "last": _last(table), **placement(model, monitor.stack), **monitor.summary_extra}
    summary = {**facts, "seconds": round(seconds, 3), "warnings": []}
    figure = monitor_figure(table, thirds(table), f"{model_label(name)} ({facts['placement']}): layers during "
                            f"training ({facts['tokens']:,} probe tokens)", crossover)
    return write_run(folder, COMMAND, tables={"monitor": table}, figures={"monitor": figure}, summary=summary,
                     config=monitor.settings, started=monitor.started, seconds=seconds,
                     facts={"model": name}, formats=monitor.settings.formats)
