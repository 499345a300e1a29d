"""merge_shards(folders): join the run folders of `prune --shard K/N` into the run an unsharded sweep writes."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from layerprobe.commands.prune import PRUNE_COMMAND
from layerprobe.commands.prune.outputs import write_prune_outputs
from layerprobe.config import PruneConfig
from layerprobe.errors import ConfigError, RunError, article, check_path
from layerprobe.runs.folder import abandons_on_error, check_out_apart, prepare_run_dir
from layerprobe.runs.read import load_run
from layerprobe.runs.schema import check_known_keys
from layerprobe.settings import from_saved, identity

# summary keys write_prune_outputs computes from the rows; the rest are facts of the model and data
COMPUTED = {"command", "metric", "higher_is_better", "baseline", "block", "variants", "least_important",
            "most_important", "angular_run", "spearman_angular_delta", "seconds", "warnings", "shard", "records",
            "correction", "significant", "documents", "min_documents", "family", "detectable", "chance_test",
            "signal_test", "rederived", "clustered", "interval_estimand"}
BASELINE_RTOL = 1e-9
SUMMED = ("block_tokens", "naive_block_tokens", "over_memory")  # prefix_cache's counts of what a process computed


def _settings(run: Any) -> dict:
    """The settings that change the numbers (settings.identity, read from the manifest), but the slice."""
    return identity(PruneConfig, saved=run.manifest.get("config", {}), skip=("shard",)) | {
        "weights": run.summary.get("weights")}


def _check_slices(runs: list) -> int:
    """Every run a shard of the same N, each K once; returns N."""
    for run in runs:
        if run.command != "prune":
            raise RunError(f"'{run.folder}' is {article(run.command)} {run.command} run: merge joins the run folders of `prune --shard K/N`.")
        if not isinstance(run.summary.get("shard"), dict):
            raise RunError(f"'{run.folder}' is not a shard (it ran without --shard): merge joins the run folders of "
                           "`prune --shard K/N`.")
    count = runs[0].summary["shard"]["count"]
    seen: dict[int, Path] = {}
    for run in runs:
        shard = run.summary["shard"]
        if shard["count"] != count:
            raise RunError(f"'{run.folder}' is shard {shard['index']}/{shard['count']} but '{runs[0].folder}' is one "
                           f"of {count}: pass the shards of one sweep.")
        if shard["index"] in seen:
            raise RunError(f"Shard {shard['index']}/{count} is given twice ('{seen[shard['index']]}' and "
                           f"'{run.folder}'): pass each shard once.")
        seen[shard["index"]] = run.folder
    missing = [k for k in range(1, count + 1) if k not in seen]
    if missing:
        raise RunError(f"Shard {', '.join(f'{k}/{count}' for k in missing)} missing: run `layerprobe prune ... "
                       f"--shard {missing[0]}/{count}` and pass its folder too.")
    return count


def _check_same_sweep(runs: list) -> None:
    first, reference = runs[0], _settings(runs[0])
    for run in runs[1:]:
        theirs = _settings(run)
        differ = [k for k in reference if theirs.get(k) != reference[k]]
        if differ:
            key = differ[0]
            raise RunError(f"'{run.folder}' and '{first.folder}' disagree on {', '.join(differ)} ({key}: "
                           f"{theirs[key]!r} vs {reference[key]!r}): they are not shards of one sweep.")
    base = _baselines(first)
    for run in runs[1:]:
        for metric, value in _baselines(run).items():
            ref = base.get(metric)
            if ref is None or abs(value - ref) > BASELINE_RTOL * max(1.0, abs(ref)):
                raise RunError(f"'{run.folder}' has baseline {metric} = {value!r} but '{first.folder}' has {ref!r}: "
                               "the shards did not evaluate the same model and data; re-run the odd one.")
    labels = [label for run in runs for label in run.summary["shard"]["variants"]]
    if len(set(labels)) != len(labels) or len(labels) != first.summary["shard"]["sweep_variants"]:
        raise RunError(f"The shards hold {len(labels)} variants ({len(set(labels))} distinct) of a "
                       f"{first.summary['shard']['sweep_variants']}-variant sweep: pass the shards of one sweep.")
    for run in runs:
        done = {str(x) for x in run.tables["prune"]["removed"]}
        if done != {str(x) for x in run.summary["shard"]["variants"]}:
            raise RunError(f"'{run.folder}' is unfinished (prune.csv lacks some of its variants): finish it with "
                           "`layerprobe prune ... --resume`.")


def _baselines(run: Any) -> dict[str, float]:
    table = run.tables["prune"]
    return {str(m): float(v) for m, v in table.groupby("metric", sort=True)["baseline"].first().items()}


def _saved_config(run: Any, overwrite: bool, formats: tuple[str, ...] | None) -> PruneConfig:
    """A shard's settings as its manifest.json saved them, for the merged run: one line where they are missing or
    name a setting this version does not know."""
    settings, where = run.manifest.get("config"), run.folder / "manifest.json"
    if not isinstance(settings, dict):
        raise RunError(f"'{where}' has no settings (its 'config' is {type(settings).__name__}): re-run that shard.")
    return from_saved(PruneConfig, settings, str(where), shard=None, resume=False, overwrite=overwrite,
                      formats=tuple(formats or settings.get("formats") or ("png",)))


def default_out(first: Path) -> Path:
    """reports/m/prune-mmlu-shard-1-of-4 -> reports/m/prune-mmlu (the folder an unsharded sweep writes)."""
    stem = re.sub(r"-shard-\d+-of-\d+(-\d{8}-\d{6}(-\d+)?)?$", "", first.name)
    return first.with_name(stem if stem != first.name else f"{first.name}-merged")


@abandons_on_error
def merge_shards(folders: list[str], out: str | None = None, overwrite: bool = False,
                 formats: tuple[str, ...] | None = None):
    """One prune run folder from its shards: the same prune.csv, plot and summary as an unsharded sweep."""
    if isinstance(folders, (str, os.PathLike)):
        raise ConfigError(f"merge takes a list of shard folders, got one path '{folders}': pass [the folder of every "
                          "`prune --shard K/N` run].")
    if not isinstance(folders, (list, tuple)):
        raise ConfigError(f"merge takes a list of shard folders, got {type(folders).__name__} {repr(folders)[:40]}: "
                          "pass [the folder of every `prune --shard K/N` run].")
    if not folders:
        raise ConfigError("No run folders given: pass the folders of every `prune --shard K/N` run.")
    for folder in folders:
        check_path(folder, "merge's shard folder")
    if out is not None:
        check_path(out, "merge's --out")
    if out is not None:
        check_out_apart(out, {f"the shard folder #{n}": f for n, f in enumerate(folders, 1)})
    runs = [load_run(f) for f in folders]
    for run in runs:
        check_known_keys(run.folder / "summary.json", run.command, run.summary)
    count = _check_slices(runs)
    runs.sort(key=lambda r: r.summary["shard"]["index"])
    configs = [_saved_config(run, overwrite, formats) for run in runs]  # every shard's, so each unknown is named
    _check_same_sweep(runs)
    first, config = runs[0], configs[0]
    shard_records, dropped = _records(runs)  # read (and checked) before the folder is claimed
    config.out = str(Path(out) if out else default_out(first.folder))
    folder = prepare_run_dir(config.out, overwrite, command=PRUNE_COMMAND)
    rows = [row for run in runs for row in run.tables["prune"].to_dict("records")]
    facts = {k: v for k, v in first.summary.items() if k not in COMPUTED}
    if all(isinstance(run.summary.get("prefix_cache"), dict) for run in runs):
        facts["prefix_cache"] = summed_prefix_cache([run.summary["prefix_cache"] for run in runs])
    warnings = list(dict.fromkeys([*(w for run in runs for w in run.summary.get("warnings", [])), *dropped]))
    seconds = sum(float(run.summary.get("seconds") or 0.0) for run in runs)
    merged = {"merged_from": [str(run.folder) for run in runs], "shards": count}
    return write_prune_outputs(folder, rows, config, facts, first.summary["higher_is_better"],
                               min(run.manifest.get("started", "") for run in runs), seconds, warnings, merged,
                               records=shard_records)


def summed_prefix_cache(shards: list[dict]) -> dict:
    """The shards' prefix_cache as one sweep's: the first's path and groups, the compute counts summed (each shard
    scored the unpruned model and its own variants, so the sum is what the sweep computed in all)."""
    return shards[0] | {k: sum(s.get(k) or 0 for s in shards) for k in SUMMED if k in shards[0]}


def _check_own_records(runs: list, found: list[list[dict]]) -> None:
    """Each shard's records hold its own variants' rows (and the unpruned model's), never another shard's: a records
    file copied from another shard (or left from another sweep) is one line naming both, before the records are
    joined, where pivoting them failed on the repeated (variant, document) rows."""
    from layerprobe.evaluation import records

    owner = {str(label): run for run in runs for label in run.summary["shard"]["variants"]}
    for run, rows in zip(runs, found):
        own = {str(label) for label in run.summary["shard"]["variants"]}
        stray = next((str(r["removed"]) for r in rows if r["removed"] != records.UNPRUNED
                      and str(r["removed"]) not in own), None)
        if stray is None:
            continue
        other = owner.get(stray)
        whose = (f"shard {other.summary['shard']['index']}/{other.summary['shard']['count']}'s ('{other.folder}')"
                 if other is not None else "no shard's of this sweep")
        raise RunError(f"'{run.folder / records.FILE}' holds records of the variant {stray!r}, which is {whose}, "
                       f"not shard {run.summary['shard']['index']}'s (its variants: {', '.join(sorted(own))}): the "
                       "shards' records overlap; restore that shard's own file, or re-run the shard, and merge again.")


def _records(runs: list) -> tuple[list[dict] | None, list[str]]:
    """(the shards' records as one sweep's: the unpruned model's rows once (the first shard's), every shard's
    variants; None when a shard has none (written before records existed, or lost), the warning saying so where
    others have them: the merged run then has no paired intervals)."""
    from layerprobe.evaluation import records

    found = [records.read(run.folder) for run in runs]
    if any(not rows for rows in found):
        lacking = [str(run.folder) for run, rows in zip(runs, found) if not rows]
        said = ([f"merge: {', '.join(repr(f) for f in lacking)} holds no per-document records ({records.FILE}), so "
                 "the merged run has none and no paired intervals (delta_lo, delta_hi, significant): restore that "
                 "file, or re-run the shard, and merge again."] if len(lacking) < len(runs) else [])
        return None, said
    _check_own_records(runs, found)
    unpruned = [r for r in found[0] if r["removed"] == records.UNPRUNED]
    return unpruned + [r for rows in found for r in rows if r["removed"] != records.UNPRUNED], []
