"""Outputs of `layerprobe gradnorm`: gradnorm.csv, gradnorm_samples.csv, variance.csv, loss.csv and training.csv
(with --steps), the plots, summary and manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerprobe.metrics.stats import depth_ratio
from layerprobe.runs.folder import model_label
from layerprobe.plots.gradnorm import gradnorm_figure, variance_by_step_figure
from layerprobe.plots.monitor import training_figure
from layerprobe.runs.write import RunResult, write_run
from layerprobe.commands.gradnorm import COMMAND, GRADNORM, TRAINING
from layerprobe.runs.columns import names

GradnormRun = RunResult  # tables: gradnorm, gradnorm_samples, variance (and loss with --steps)

COLUMNS = names(GRADNORM)  # declared in this command's record (commands/gradnorm/__init__.py)


@dataclass
class GradnormTables:
    raw: Any  # one row per (placement, seed, step, batch, layer, kind, module)
    table: Any  # mean and std over seeds x batches: norm, step, layer, kind, module, grad_norm, std, samples
    variance: Any  # norm, step, layer, variance, std, samples
    losses: Any  # norm, seed, step, loss (training only)
    training: Any  # training.csv: placement, seed, then monitor.csv's columns (training only)


def aggregate(row_pairs: list, loss_pairs: list, training_pairs: list = ()) -> GradnormTables:
    """Every rank's (job, row) pairs, in job order (the table of a single process: the sort is stable), averaged."""
    import pandas as pd

    def in_order(pairs):
        return [row for _, row in sorted(pairs, key=lambda p: p[0])]

    raw = pd.DataFrame(in_order(row_pairs))
    losses = pd.DataFrame(in_order(loss_pairs))
    training = pd.DataFrame(in_order(training_pairs), columns=names(TRAINING))
    keys = ["norm", "step", "layer", "kind", "module"]
    grads = raw[raw["kind"] != "variance"].groupby(keys, sort=False)["grad_norm"]
    table = grads.agg(grad_norm="mean", std="std", samples="count").reset_index()
    # std of one sample is NaN (pandas' ddof=1), written empty: no spread is measured, never a spread of 0
    variance = raw[raw["kind"] == "variance"].groupby(["norm", "step", "layer"], sort=False)["variance"]
    variance = variance.agg(variance="mean", std="std", samples="count").reset_index()
    return GradnormTables(raw, table, variance, losses, training)


def training_summary(training: Any) -> dict:
    """Per placement, seeds averaged: the step from which the deep third's d(l, 1) stays below the shallow
    third's (None: not below at the end) and the two thirds' means at the last step measured."""
    from layerprobe.metrics.thirds import crossover_step, thirds

    found = {}
    for placement, part in training.groupby("placement", sort=False):
        mean = part.groupby(["step", "layer"], as_index=False)["distance_next"].mean()
        last = thirds(mean).iloc[-1]
        found[placement] = {"crossover_step": crossover_step(mean), "shallow_distance": float(last["shallow"]),
                            "deep_distance": float(last["deep"])}
    return found


def _series(frame: Any, norm: str, step: int, kind: str | None, value: str) -> list[float]:
    part = frame[(frame["norm"] == norm) & (frame["step"] == step)]
    if kind is not None:
        part = part[part["kind"] == kind]
    return part.sort_values("layer")[value].tolist()


def placements_summary(table: Any, variance: Any) -> dict:
    """Per placement (and step): late-over-early ratios of gradient norms and variance, and the per-layer values."""
    whole = table[table["module"] == "block"]
    steps = sorted(table["step"].unique())
    first, last = steps[0], steps[-1]
    placements = {}
    for norm in whole["norm"].unique():
        by_step = {}
        for step in steps:
            params = _series(whole, norm, step, "params", "grad_norm")
            inputs = _series(whole, norm, step, "input", "grad_norm")
            var = _series(variance, norm, step, None, "variance")
            by_step[int(step)] = {
                "params_late_over_early": depth_ratio(params),
                "input_late_over_early": depth_ratio(inputs) if inputs else None,
                "variance_late_over_early": depth_ratio(var) if var else None,
                "params_by_layer": params,
                "variance_by_layer": var,
            }
        placements[norm] = {**by_step[int(first)], "steps": by_step} if last != first else by_step[int(first)]
    return placements


def write_gradnorm_outputs(folder: Path, tables: GradnormTables, config: Any, facts: dict, started: str,
                           seconds: float, warnings: list[str]) -> GradnormRun:
    table, variance, losses = tables.table, tables.variance, tables.losses
    csvs = {"gradnorm": table[COLUMNS], "gradnorm_samples": tables.raw,
            "variance": variance[["norm", "step", "layer", "variance", "std", "samples"]]}
    if len(losses):
        csvs["loss"] = losses
    if len(tables.training):
        csvs["training"] = tables.training
    steps = sorted(table["step"].unique())
    titled = facts | {"model": model_label(str(facts["model"]))}  # titles name a local path by its last part
    figures = {"gradnorm": gradnorm_figure(table, variance, titled)}
    if steps[-1] != steps[0]:
        figures["variance"] = variance_by_step_figure(variance, titled)
    training = training_summary(tables.training) if len(tables.training) else {}
    if training:
        figures["training"] = training_figure(tables.training, training, titled)
    summary = {**facts, "placements": placements_summary(table, variance),
               "seconds": round(seconds, 3), "warnings": warnings}
    if len(losses):
        final = losses[losses["step"] == losses["step"].max()].groupby("norm", sort=False)["loss"].mean()
        summary["final_loss"] = {norm: float(v) for norm, v in final.items()}
    if training:
        summary["training"] = training
    return write_run(folder, COMMAND, tables=csvs, figures=figures, summary=summary, config=config,
                     started=started, seconds=seconds, facts=facts, formats=config.formats)
