"""rederive(folder): a finished prune or curve run's intervals, Holm flags and decisions recomputed from its own
per-document records (samples.csv.gz) by this layerprobe, without loading the model: prune.csv / scores.csv's
paired columns, curve.csv's `within`, summary.json's decision keys (commands/prune/decide.py), and the figure
that draws the intervals (prune.png, curve.png: the run's own drawing functions, in the run's formats; a prune figure
whose angular run is gone stays as it was). Scores, layer sets and manifest.json stay as the run wrote them;
summary.json's `rederived` says what changed and by which version. For committed example runs scored before the
decisions existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerprobe.errors import RunError


def _intervals(run: Any, name: str, records: list[dict], family: str, cluster: str = "none") -> Any:
    from layerprobe.evaluation.records import add_intervals

    s = run.summary
    return add_intervals(run.tables[name], records, s.get("task", ""), s.get("groups"), s["metric"], family, cluster)


def _signals(run: Any, main: Any, higher: bool) -> dict | None:
    """The prune run's signal_test, from the angular run it was correlated with (None where it is gone)."""
    import numpy as np

    from layerprobe.commands.prune.decide import signal_test
    from layerprobe.commands.prune.outputs import _angular_distance, cheap_signals

    s = run.summary
    angular = Path(s["angular_run"]) if s.get("angular_run") else None
    if angular is None or not (angular / "angular.csv").is_file() or s.get("block", 1) != 1:
        return s.get("signal_test")
    values = {"angular": _angular_distance(angular, main["layer"], 1),
              **cheap_signals(angular, main["layer"], s["num_layers"])}
    values = {k: v for k, v in values.items() if np.isfinite(v).all()}
    cost = (-main["delta"] if higher else main["delta"]).to_numpy()
    return signal_test(values, cost)


def _figure(run: Any, tables: dict, summary: dict) -> Any:
    """The run's figure redrawn from its recomputed table, or None where it cannot be drawn alike."""
    from layerprobe.commands.prune.curve import curve_figure
    from layerprobe.commands.prune.outputs import _angular_distance, prune_figure

    if run.command == "curve":
        return curve_figure(tables["curve"], summary)
    main = tables["prune"][tables["prune"]["metric"] == summary["metric"]].sort_values("layer")
    angular = Path(summary["angular_run"]) if summary.get("angular_run") else None
    if angular is None:
        return prune_figure(main, summary, None)
    if not (angular / "angular.csv").is_file():
        return None  # its d(l, l+n) line cannot be drawn again
    return prune_figure(main, summary, _angular_distance(angular, main["layer"], summary.get("block", 1)))


def _prune(run: Any, records: list[dict], family: str, cluster: str) -> tuple[dict, dict]:
    from layerprobe.commands.prune.decide import prune_decisions
    from layerprobe.commands.prune.outputs import significant_labels

    s, higher = run.summary, bool(run.summary.get("higher_is_better", True))
    table = _intervals(run, "prune", records, family, cluster)
    main = table[table["metric"] == s["metric"]].sort_values("layer")
    found = {"significant": significant_labels(main, higher),
             **prune_decisions(table, records, s.get("task", ""), s["metric"], family, cluster, s.get("groups")),
             "signal_test": _signals(run, main, higher)}
    return found, {"prune": table}


def _sets(curve: Any, num_layers: int) -> dict:
    from layerprobe.removal import parse_remove

    sets: dict = {}
    for row in curve.itertuples():
        sets.setdefault(row.strategy, {})[int(row.k)] = parse_remove(str(row.removed), num_layers)
    return sets


def _curve(run: Any, records: list[dict], family: str, keep_by: str, cluster: str) -> tuple[dict, dict]:
    import math

    from layerprobe.commands.prune.curve import curve_table
    from layerprobe.commands.prune.decide import curve_decisions
    from layerprobe.evaluation.records import UNPRUNED, healed_intervals, interval_estimand

    s, higher, metric = run.summary, bool(run.summary.get("higher_is_better", True)), run.summary["metric"]
    scores = _intervals(run, "scores", records, family, cluster)
    old = run.tables["curve"]
    healed = {str(r.removed): float(r.healed_score) for r in old.itertuples()
              if "healed_score" in old and r.healed_score == r.healed_score}
    if healed and s.get("healed_baseline") is not None:
        healed[UNPRUNED] = s["healed_baseline"]
    sets = [label for label in healed if label != UNPRUNED]  # the unpruned model healed alike is the reference
    found = healed_intervals(records, metric, sets) if healed else None
    table = curve_table(_sets(old, s["num_layers"]), scores.to_dict("records"), metric, higher, s["keep"],
                        s["num_layers"], healed or None, keep_by, found)
    if not healed:
        table["healed_score"] = math.nan
    estimand = interval_estimand(records, metric, s.get("task", ""), s.get("groups"), cluster)
    decided = curve_decisions(table, records, s.get("task", ""), metric, higher, s["keep"], keep_by, scores, estimand)
    return {"keep_by": keep_by, **decided, "interval_estimand": estimand}, {"curve": table, "scores": scores}


def rederive(folder: Path | str, keep_by: str = "bound", family: str = "main", cluster: str = "none") -> dict:
    """Recompute a finished prune or curve run's intervals and decisions from its records; returns the new
    summary. Refuses a run without records (nothing to recompute from). cluster: 'none' (the estimand runs
    scored before --cluster carried) or 'subtask' (a new run's default)."""
    from layerprobe import __version__
    from layerprobe.evaluation import records as records_file
    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.read import load_run
    from layerprobe.runs.schema import check_summary

    run = load_run(Path(folder))
    if run.command not in ("prune", "curve"):
        raise RunError(f"{folder} holds a {run.command} run: rederive reads prune and curve runs.")
    records = records_file.read(run.folder)
    if not records:
        raise RunError(f"{folder} has no {records_file.FILE}: its decisions cannot be recomputed; score it again.")
    found, tables = (_prune(run, records, family, cluster) if run.command == "prune"
                     else _curve(run, records, family, keep_by, cluster))
    figure = _figure(run, tables, {**run.summary, **found})
    stem = "curve" if run.command == "curve" else "prune"
    formats = tuple(run.manifest.get("config", {}).get("formats") or ("png",))
    summary = check_summary(run.command, {**run.summary, **found, "rederived": {
        "layerprobe": __version__, "from": records_file.FILE, "family": family, "cluster": cluster,
        "keep_by": keep_by if run.command == "curve" else None,
        "recomputed": sorted(tables) + ["summary.json decisions"] + ([f"{stem} figure"] if figure else [])}})
    for name, table in tables.items():  # in the columns' order the run wrote, new columns after them
        old = list(run.tables[name].columns)
        write_csv(run.folder / f"{name}.csv", table[[c for c in old if c in table] + [c for c in table if c not in old]])
    if figure is not None:
        save_figure(run.folder / stem, figure, formats)
    write_json(run.folder / "summary.json", summary)
    return summary
