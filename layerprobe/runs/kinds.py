"""One record per command whose runs can be read back: its tables, plot, report heading and header facts, its
settings class, and its findings, per-layer table and comparer. The built-in commands' Kinds are here; a command
added later brings its own Kind in its Command record (commands/__init__.py), which `register` adds.

The built-in functions are named as lazy 'module:function' strings (as lm-eval's registries do), so this table
imports nothing from report/ or plots/ (which read it: a real reference would be an import cycle) and every layer
may read it; tests/unit/test_commands.py resolves every one. A Kind may also hold the functions themselves.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from layerprobe.config import AngularConfig, GradnormConfig, HealConfig, PruneConfig, ToyConfig


@dataclass(frozen=True)
class Kind:
    name: str
    tables: tuple[tuple[str, bool], ...]  # (CSV file, required) a finished run holds
    plot: str  # the figure the report shows
    heading: str  # the report's section heading
    facts: tuple[tuple[str, str], ...]  # header facts: (label, summary key or a format string of summary keys)
    findings: str | Callable  # (run) -> list of sentences ('module:function' or the function)
    data_table: str | Callable  # (run) -> the per-layer DataFrame printed under the plot
    comparer: str | Callable | None = None  # (old, new, tolerance, into, name), None: not comparable
    label_key: str | None = None  # summary key added to the model name in labels, e.g. the task
    label_word: str = ""  # a word after it, so two kinds of one task read apart ("kl" and "kl curve")
    overlay: str | Callable | None = None  # (run) -> (layers, values): one line of the report's overlay
    overlay_axis: tuple[str, str] = ("", "")  # the overlay's (y label, title)
    settings: type | None = None  # the settings class its manifest's config is (compare: what changed)

    def function(self, attribute: str) -> Callable[..., Any]:
        """The function an attribute holds, imported first where it is named as 'module:function'."""
        return resolve_ref(getattr(self, attribute))


def resolve_ref(ref: str | Callable) -> Callable[..., Any]:
    """A function, or the function a 'module:function' string names (imported on first use)."""
    if callable(ref):
        return ref
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("angular", (("angular.csv", True), ("layers.csv", True)), "heatmap.png",
         "Angular distance between block inputs",
         (("normalization", "placement"), ("dataset", "dataset"), ("tokens", "tokens"), ("positions", "positions")),
         "layerprobe.report.findings:angular_findings", "layerprobe.report.tables:angular_table",
         "layerprobe.runs.compare:compare_angular", overlay="layerprobe.report.tables:angular_by_depth",
         settings=AngularConfig,
         overlay_axis=("d(l, 1)", "Angular distance of each layer, by relative depth")),
    Kind("prune", (("prune.csv", True),), "prune.png", "Pruning: performance drop per layer",
         (("normalization", "placement"), ("task", "task"), ("metric", "metric"), ("block", "block")),
         "layerprobe.report.findings:prune_findings", "layerprobe.report.tables:prune_table",
         "layerprobe.runs.compare:compare_prune", label_key="task", overlay="layerprobe.report.tables:prune_by_depth",
         settings=PruneConfig,
         overlay_axis=("rank of the cost (0 = cheapest)", "Cost of removing each layer, ranked within each run, by relative depth")),
    Kind("curve", (("curve.csv", True), ("scores.csv", False)), "curve.png",
         "Removal curves: the score as more layers go, by strategy",
         (("normalization", "placement"), ("task", "task"), ("metric", "metric"), ("part", "part"), ("keep", "keep")),
         "layerprobe.report.findings:curve_findings", "layerprobe.report.tables:curve_table",
         "layerprobe.runs.compare:compare_curve", label_key="task", label_word="curve", settings=PruneConfig),
    Kind("gradnorm", (("gradnorm.csv", True), ("variance.csv", False)), "gradnorm.png", "Gradient norms by layer",
         (("arch", "arch"), ("seeds x batches", "{seeds} x {batches}"), ("steps", "steps")),
         "layerprobe.report.findings:gradnorm_findings", "layerprobe.report.tables:gradnorm_table",
         "layerprobe.runs.compare:compare_gradnorm", settings=GradnormConfig),
    Kind("monitor", (("monitor.csv", True),), "monitor.png", "During training: d(l, 1) and gradient norms by step",
         (("normalization", "placement"), ("dataset", "dataset"), ("probe tokens", "tokens"), ("every", "every"),
          ("deep below shallow from step", "crossover_step")),
         "layerprobe.report.findings:monitor_findings", "layerprobe.report.tables:monitor_table",
         "layerprobe.runs.compare:compare_monitor"),
    Kind("heal", (("heal.csv", True), ("replace.csv", False)), "heal.png",
         "Healing after removal: LoRA, the tail, or linear replacement of the removed blocks",
         (("removed", "removed"), ("method", "method"), ("objective", "objective"), ("steps", "steps"),
          ("dataset", "dataset")),
         "layerprobe.report.findings:heal_findings", "layerprobe.report.tables:heal_table", settings=HealConfig),
    Kind("toy", (("toy.csv", True),), "toy.png", "Toy residual-MLP model (||h_l|| by layer)",
         (("width", "width"), ("samples", "samples"), ("alphas", "alphas")),
         "layerprobe.report.findings:toy_findings", "layerprobe.report.tables:toy_table", settings=ToyConfig),
)}
