"""LayerMonitor: every N steps of a user's own training loop, per layer d(x_l, x_l+1), Block Influence, hidden-state
norm and variance on a fixed probe set, and the gradient norm of each block from that step's own backward pass;
rows appended to a `monitor` run folder, values handed to a logger under stable keys.

    monitor = LayerMonitor(model, tokenizer, every=50, out="reports/mine/monitor")
    for step, batch in enumerate(loader, start=1):
        model(**batch).loss.backward()
        optimizer.step()
        monitor.step(step)  # after the backward, before zero_grad: the gradients are read, never changed
        optimizer.zero_grad()
    monitor.close()  # monitor.csv, monitor.png, summary.json, manifest.json
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layerprobe.commands.monitor import COMMAND
from layerprobe.config import MonitorSettings
from layerprobe.errors import ConfigError
from layerprobe.integrations.measure import rank_and_size, measure_probe, probe_batches, unwrapped
from layerprobe.metrics.gradients import param_grad_norms
from layerprobe.models.layers import find_blocks
from layerprobe.runs.columns import MONITOR, names
from layerprobe.runs.folder import prepare_run_dir, release_run_dir, write_csv
from layerprobe.runs.manifest import start_time
from layerprobe.settings import check_call, validate

logger = logging.getLogger(__name__)

# logger key quantity -> monitor.csv column: `layerprobe/<quantity>/layer_<l>`
LOG_KEYS = {"angular": "distance_next", "block_influence": "block_influence", "grad_norm": "grad_norm",
            "norm": "norm", "variance": "variance"}
DATA_FIELDS = {f.name for f in dataclasses.fields(MonitorSettings().data)}


def monitor_settings(settings: MonitorSettings | None = None, **options: Any) -> MonitorSettings:
    """Settings from a MonitorSettings and keyword overrides (every=..., out=..., and the probe's dataset=,
    tokens=, seq_len=, batch_size=, text_field=), validated against their declarations."""
    settings = settings or MonitorSettings()
    check_call(settings, MonitorSettings, "LayerMonitor")  # a MonitorSettings, each field of its declared type
    own = {f.name for f in dataclasses.fields(MonitorSettings)} - {"data"}
    unknown = sorted(set(options) - own - DATA_FIELDS)
    if unknown:
        raise ConfigError(f"Unknown monitor setting(s) {', '.join(unknown)}: use {', '.join(sorted(own | DATA_FIELDS))}.")
    data = dataclasses.replace(settings.data, **{k: v for k, v in options.items() if k in DATA_FIELDS})
    settings = dataclasses.replace(settings, data=data, **{k: v for k, v in options.items() if k in own})
    check_call(settings, MonitorSettings, "LayerMonitor")
    validate(settings, every=True)
    return settings


def step_rows(step: int, stats: Any, grads: list[float] | None) -> list[dict]:
    """monitor.csv rows of one measurement: row l describes x_l (block l's input) and block l; the last row is the
    last block's output (no next layer, no block)."""
    nan = float("nan")
    count = len(stats.norm)
    values = {
        "step": [step] * count,
        "layer": list(range(count)),
        "distance_next": [float(stats.distance[l, l + 1]) for l in range(count - 1)] + [nan],
        "block_influence": [1.0 - float(c) for c in stats.cos_next] + [nan],
        "norm": [float(v) for v in stats.norm],
        "variance": [float(v) for v in stats.variance],
        "grad_norm": (list(grads) if grads is not None else [nan] * (count - 1)) + [nan],
        "tokens": [stats.tokens] * count,
    }
    return [{name: values[name][l] for name in names(MONITOR)} for l in range(count)]


def log_values(rows: list[dict]) -> dict[str, float]:
    """{'layerprobe/<quantity>/layer_<l>': value} of one measurement's finite values."""
    return {f"layerprobe/{quantity}/layer_{row['layer']}": row[column]
            for quantity, column in LOG_KEYS.items() for row in rows if math.isfinite(row[column])}


class LayerMonitor:
    """Per-layer measurements inside a training loop (see the module docstring). `log(values, step)` receives each
    measurement's values under their `layerprobe/...` keys on rank 0 (default: the Python logger, at debug).
    probe: your own (input_ids, attention_mask) batches instead of `dataset` (then no tokenizer is needed).
    stack: the BlockStack when the caller found it already; shared=False measures this process's model alone, never
    summed over the ranks of a torch.distributed group (gradnorm's ranks train models of their own)."""

    def __init__(self, model: Any, tokenizer: Any = None, settings: MonitorSettings | None = None, *,
                 probe: list | None = None, log: Callable[[dict, int], None] | None = None, stack: Any = None,
                 shared: bool = True, **options: Any) -> None:
        self.settings = monitor_settings(settings, **options)
        if not callable(getattr(model, "named_modules", None)):
            raise ConfigError(f"LayerMonitor takes the model being trained (a torch.nn.Module), got "
                              f"{type(model).__name__} {repr(model)[:40]}: pass the model.")
        self.model = unwrapped(model)
        self.stack = stack if stack is not None else find_blocks(self.model, self.settings.layers_path)
        self.shared = shared
        if probe is None and tokenizer is None:
            raise ConfigError("LayerMonitor needs a tokenizer to build its probe batches: pass tokenizer=, or "
                              "probe= a list of (input_ids, attention_mask) batches.")
        self.probe, self.dataset = ((list(probe), "the given probe batches") if probe is not None
                                    else probe_batches(tokenizer, self.settings.data))
        self.log = log or (lambda values, step: logger.debug("step %d: %s", step, values))
        self.rows: list[dict] = []
        self.summary_extra: dict = {}  # what the caller adds to summary.json (the Trainer's clipping, accumulation)
        self.main = not shared or rank_and_size()[0] == 0
        self.started, self.clock = start_time(), time.perf_counter()
        self.folder: Path | None = None
        if self.main and self.settings.out:
            self.folder = prepare_run_dir(self.settings.out, self.settings.overwrite, command=COMMAND)

    @property
    def facts(self) -> dict:
        """The old name of summary_extra (kept for callers written before the rename)."""
        return self.summary_extra

    @facts.setter
    def facts(self, value: dict) -> None:
        self.summary_extra = value

    def due(self, step: int) -> bool:
        return step % self.settings.every == 0

    def gradients(self) -> list[float]:
        """Each block's parameter gradient norm now: call it after the backward, before the gradients are zeroed."""
        return param_grad_norms(self.stack.blocks)

    def record(self, step: int, grads: list[float] | None = None) -> dict[str, float]:
        """Measure the probe set now, store and log the rows of `step` with the given gradient norms; returns the
        logged values. Every rank of a DDP run calls it (the probe batches are split over them)."""
        stats = measure_probe(self.model, self.stack, self.probe, shared=self.shared)
        rows = step_rows(step, stats, grads)
        self.rows = [r for r in self.rows if r["step"] != step] + rows
        values = log_values(rows)
        if self.main:
            if self.folder is not None:
                write_csv(self.folder / "monitor.csv", self.table())
            self.log(values, step)
        return values

    def step(self, step: int) -> dict[str, float] | None:
        """At a step due (step % every == 0): the gradients of this step's backward, then the probe; else None."""
        if not self.due(step):
            return None
        return self.record(step, self.gradients())

    def finish(self, step: int) -> Any:
        """At the end of training: measure the final weights if `step` was not measured (max_steps no multiple of
        every), then close()."""
        if not any(row["step"] == step for row in self.rows):
            self.record(step)
        return self.close()

    def table(self) -> Any:
        """monitor.csv so far, as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=names(MONITOR))

    def close(self) -> Any:
        """Write the finished run (monitor.csv, monitor.png, summary.json, manifest.json) on rank 0 and return its
        RunResult; None without rows, on other ranks, or without a folder."""
        from layerprobe.integrations.outputs import write_monitor_run

        folder, self.folder = self.folder, None
        if folder is None or not self.rows:
            if folder is not None:
                release_run_dir(folder)
            return None
        return write_monitor_run(folder, self, time.perf_counter() - self.clock)

    def __enter__(self) -> LayerMonitor:
        return self

    def __exit__(self, kind: Any, *exc: object) -> None:
        if kind is None:
            self.close()
