"""Outputs of a pruning sweep: prune.csv, the dP bar plot with the angular correlation, summary and manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from layerprobe.commands.prune.decide import prune_decisions, signal_test
from layerprobe.errors import ConfigError, RunError, article
from layerprobe.evaluation.metric import has_baseline
from layerprobe.metrics.paired import CORRECTION
from layerprobe.metrics.stats import spearman
from layerprobe.plots.bars import prune_bars
from layerprobe.report.findings import ends
from layerprobe.runs.folder import model_label
from layerprobe.runs.write import RunResult, write_run
from layerprobe.commands.prune import PRUNE as PRUNE_COLUMNS, PRUNE_COMMAND
from layerprobe.runs.columns import names, signals

COLUMNS = names(PRUNE_COLUMNS)  # declared in this command's record (commands/prune/__init__.py)
PREFERRED = ("acc", "acc_norm", "f1", "exact_match", "ppl", "kl", "drift")

PruneRun = RunResult  # tables: prune (COLUMNS)


def prune_figure(main: Any, summary: dict, distance: np.ndarray | None) -> Any:
    """The run's bars of its main metric's changes with their intervals, from its rows and summary (model, task,
    metric, baseline, block, the Spearman correlations): the run's own figure, and rederive's after the intervals
    are recomputed. `distance`: the angular run's d(l, l+block) per row, or None."""
    metric = summary["metric"]
    title = f"{model_label(summary['model'])}: {summary['task']}"
    if has_baseline(metric) and summary["baseline"] is not None:
        title += f", unpruned {metric} = {summary['baseline']:.4g}"
    correlations = summary.get("spearman_delta") or {}
    return prune_bars(main["removed"].astype(str).tolist(), main["delta"].to_numpy(), metric, title, distance,
                      summary.get("spearman_angular_delta"),
                      {CHEAP_SIGNALS.get(k, "d(l, 1)"): v for k, v in correlations.items()},
                      summary.get("block", 1), main["layer_type"].tolist() if "layer_type" in main else None,
                      interval=(main["delta_lo"].to_numpy(), main["delta_hi"].to_numpy()))


def check_metric(metric: str | None, available: list[str]) -> str:
    """--metric, or the first of PREFERRED the task reports."""
    if metric is None:
        return next((m for m in PREFERRED if m in available), available[0])
    if metric not in available:
        raise ConfigError(f"--metric '{metric}' is not reported by this task: pick one of {', '.join(available)}.")
    return metric


def find_angular(folder: Path, explicit: str | None, model: str | None = None, weights: str | None = None,
                 allow: bool = False) -> Path | None:
    """--angular DIR (a finished angular run, read back whole, of the same weights), else an `angular` run beside
    this one (reports/<model>/angular) of the same model: a sibling run of another model is passed over."""
    from layerprobe.runs.read import load_run

    if explicit:
        run = load_run(explicit)
        if run.command != "angular":
            raise RunError(f"--angular '{explicit}' holds {article(run.command)} {run.command} run: pass a `layerprobe angular` run folder.")
        theirs = run.summary.get("weights")
        if weights is not None and theirs is not None and theirs != weights and not allow:
            raise RunError(f"--angular '{explicit}' measured other weights ({str(theirs)[:30]}...) than this run's "
                           f"({weights[:30]}...): pass an angular run of the same model, or --allow-other-weights to "
                           "use it anyway.")
        return Path(explicit)
    sibling = folder.parent / "angular"
    if not (sibling / "angular.csv").is_file():
        return None
    try:
        run = load_run(sibling)
    except RunError:
        return None  # unfinished or damaged: not a run to correlate with
    if model is not None and run.summary.get("model") != model:
        return None
    if weights is not None and run.summary.get("weights") not in (None, weights):
        return None
    return sibling


def _angular_distance(angular_dir: Path, layers: Any, block: int) -> np.ndarray:
    """d(l, block) of the angular run for each start layer (NaN where the run has no such block)."""
    import pandas as pd

    angular = pd.read_csv(angular_dir / "angular.csv")
    lookup = {(int(r.layer), int(r.n)): r.distance for r in angular.itertuples()}
    return np.array([lookup.get((int(layer), block), np.nan) for layer in layers])


# The cheap per-layer signals of an angular run's layers.csv, correlated with the measured dP of one-layer sweeps
CHEAP_SIGNALS = signals()  # layers.csv column -> its legend name (runs/columns.py); d(l, 1) is "angular"


def cheap_signals(angular_dir: Path, layers: Any, num_layers: int) -> dict[str, np.ndarray]:
    """signal -> its value at each removed layer, for the signals the angular run measured on this model's layers."""
    import pandas as pd

    table = pd.read_csv(angular_dir / "layers.csv")
    if len(table) != num_layers + 1:
        return {}
    found = {}
    for column in CHEAP_SIGNALS:
        if column in table and table[column].iloc[:num_layers].notna().all():
            found[column] = table[column].to_numpy()[[int(layer) for layer in layers]]
    return found


def significant_labels(main: Any, higher: bool) -> list[str]:
    """The variants whose dP is significant (paired interval, Holm's correction), costliest first."""
    chosen = main[main["significant"].astype(bool)] if "significant" in main else main.iloc[:0]
    return [str(x) for x in chosen.sort_values("delta", ascending=higher)["removed"]]


def with_records(folder: Path, table: Any, records: list[dict] | None, task: str, groups: dict | None,
                 main: str | None = None, family: str = "main", cluster: str = "none") -> Any:
    """The table with its paired intervals (evaluation/records.py; Holm over `family`, of the `main` metric;
    `cluster` subtask: clustered by subtask where there are enough), and the records written beside it."""
    from layerprobe.evaluation import records as records_file

    if records:
        records_file.write(folder, records)
    return records_file.add_intervals(table, records, task, groups, main, family, cluster)


def write_prune_outputs(folder: Path, rows: list[dict], config: Any, facts: dict, higher: bool, started: str,
                        seconds: float, warnings: list[str], manifest_extra: dict | None = None,
                        records: list[dict] | None = None) -> PruneRun:
    import pandas as pd

    table = pd.DataFrame(rows, columns=COLUMNS).sort_values(["layer", "metric"]).reset_index(drop=True)
    metric = check_metric(config.metric, list(dict.fromkeys(table["metric"])))
    family, cluster = getattr(config, "family", "main"), getattr(config, "cluster", "none")
    table = with_records(folder, table, records, config.task, facts.get("groups"), metric, family, cluster)
    kinds = facts.get("layer_types") or []
    if len(kinds) == facts.get("num_layers"):  # the kind of the removed layer(s): attention, mamba, ...
        table["layer_type"] = ["+".join(dict.fromkeys(kinds[int(r.layer): int(r.layer) + int(r.block)]))
                               for r in table.itertuples()]
    main = table[table["metric"] == metric].sort_values("layer")
    harm = -main["delta"] if higher else main["delta"]  # how much worse the model gets without the layer(s)
    cheap, costly = ends(main, higher)
    correlation = distance = None
    correlations: dict[str, float] = {}
    values: dict[str, np.ndarray] = {}  # each cheap signal at the removed layers, for the test of which to trust
    angular_dir = find_angular(folder, config.angular, facts.get("model"), facts.get("weights"),
                               config.allow_other_weights)
    if angular_dir is not None:
        distance = _angular_distance(angular_dir, main["layer"], config.block)
        if np.isfinite(distance).all():
            correlation = spearman(distance, main["delta"].to_numpy())
            if correlation is not None:  # None: undefined (a constant column), never printed as a number
                correlations["angular"], values["angular"] = correlation, distance
            if config.block == 1 and getattr(config, "part", "block") == "block":
                for name, signal in cheap_signals(angular_dir, main["layer"], facts["num_layers"]).items():
                    rho = spearman(signal, main["delta"].to_numpy())
                    if rho is not None:
                        correlations[name], values[name] = rho, signal
        else:
            warnings.append(f"The angular run {angular_dir} does not match this model's layers: no correlation.")
            distance = None
    summary = {
        **facts,
        "metric": metric,
        "higher_is_better": higher,
        "baseline": float(main["baseline"].iloc[0]) if len(main) else None,
        "block": config.block,
        "variants": len(main),
        # at most half the variants each way, ties never cut (report/findings.py ends): no layer is ever both
        "least_important": [str(x) for rows in cheap for x in rows["removed"]],
        "most_important": [str(x) for rows in costly for x in rows["removed"]],
        "angular_run": str(angular_dir) if angular_dir else None,
        "spearman_angular_delta": correlation,
        # Spearman of each cheap signal of the angular run (d(l, n), Block Influence, logit-lens KL) with dP
        "spearman_delta": correlations,
        "records": "samples.csv.gz" if records else None,
        "correction": CORRECTION,
        "significant": significant_labels(main, higher),
        **prune_decisions(table, records, config.task, metric, family, cluster, facts.get("groups")),
        "signal_test": signal_test(values, harm.to_numpy()) if config.block == 1 else None,
        "seconds": round(seconds, 3),
        "warnings": warnings,
    }
    figure = prune_figure(main, {**summary, "model": facts["model"], "task": config.task}, distance)
    return write_run(folder, PRUNE_COMMAND, tables={"prune": table}, figures={"prune": figure}, summary=summary,
                     config=config, started=started, seconds=seconds, facts=facts, formats=config.formats,
                     manifest_extra=manifest_extra, warnings=warnings)
