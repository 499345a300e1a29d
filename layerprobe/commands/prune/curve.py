"""run_curve(config): `prune --curve`. For k = 1..K each strategy picks k layers to remove; every distinct set is
scored on the task as a prune variant (in place, one load, shared prefix), and curve.csv says how the score falls.

The built-in strategies' picking functions (their records, in strategies.py, name them; 0-based block ids, a set of
consecutive ids is an ordinary block):
- angular: the k consecutive layers l..l+k-1 whose start minimizes d(x_l, x_{l+k}) (Gromov et al. 2024);
- bi: the k layers of smallest Block Influence 1 - cos(x_l, x_{l+1}) (ShortGPT);
- greedy: remove the layer whose removal raises a task-free metric least, then repeat on the shorter model (SLEB);
- last: the last k layers (the naive baseline).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from layerprobe.commands.prune import CURVE_COMMAND
from layerprobe.commands.probe import Probe
from layerprobe.commands.prune.decide import curve_decisions, judged
from layerprobe.commands.prune.healed import UNPRUNED, check_foldable, check_healing, heal_method, heal_sets, refusals
from layerprobe.commands.prune.outputs import COLUMNS, check_metric, find_angular, with_records
from layerprobe.commands.prune.sweeps import SweepJob, open_sweep, task_kind
from layerprobe.config import GREEDY_ENDS, AngularConfig, CurveSettings, PruneConfig
from layerprobe.strategies import STRATEGIES
from layerprobe.data.packing import batches, empty_corpus_error
from layerprobe.models.layers import is_encoder
from layerprobe.errors import ConfigError, NumericsError, RunError, numerics_fix
from layerprobe.evaluation.metric import METRICS, RESCORING, accepted_by, tolerance_edge, within
from layerprobe.evaluation.taskfree import Sums, finish, score_batch_naive, score_batch_shared
from layerprobe.evaluation.variants import PARTS, Variant
from layerprobe.evaluation.records import healed_intervals, interval_estimand
from layerprobe.plots.curve import curve_plot
from layerprobe.progress import Progress, silent
from layerprobe.runs.folder import abandons_on_error, check_owned, model_label, prepare_run_dir
from layerprobe.runs.manifest import start_time
from layerprobe.runs.read import is_run, load_run
from layerprobe.runs.resume import Ledger, check_resume
from layerprobe.runs.write import RunResult, write_run
from layerprobe.commands.prune import CURVE, CURVE_HEALED as HEALED_COLUMNS, CURVE_PAIRED as PAIRED_COLUMNS
from layerprobe.runs.columns import names
from layerprobe.metrics.paired import CORRECTION
from layerprobe.report.findings import chance_of
from layerprobe.settings import takes

CURVE_COLUMNS = names(CURVE)  # declared in prune's record (commands/prune/__init__.py)
CURVE_PAIRED = names(PAIRED_COLUMNS)  # the paired interval of each point's delta (evaluation/records.py)
CURVE_HEALED = names(HEALED_COLUMNS)  # --heal: the healed points' paired intervals

CurveRun = RunResult  # tables: curve (CURVE_COLUMNS), scores (the prune rows of every scored set)


def largest_k(settings: CurveSettings, num_layers: int) -> int:
    """K: --max-removed, else the --max-fraction share of the layers (at least 1, at most L - 1)."""
    if settings.max_removed is not None:
        if not 1 <= settings.max_removed < num_layers:
            raise ConfigError(f"--max-removed {settings.max_removed}: the model has {num_layers} layers, so use "
                              f"1..{num_layers - 1}.")
        return settings.max_removed
    if not 0 < settings.max_fraction < 1:
        raise ConfigError(f"--max-fraction {settings.max_fraction}: use a fraction between 0 and 1, e.g. 0.5.")
    return max(1, min(num_layers - 1, int(settings.max_fraction * num_layers)))


def rescoring(settings: CurveSettings) -> list[str]:
    """The chosen strategies that pick by scoring the probe corpus (Strategy.rescores: greedy)."""
    return [s for s in settings.strategies if STRATEGIES[s].rescores]


def check_greedy_room(settings: CurveSettings, k_max: int, num_layers: int) -> None:
    """A rescoring strategy (greedy) with --greedy-ends keep never removes the first or the last block: at most
    L - 2 can go."""
    if rescoring(settings) and settings.greedy_ends == "keep" and k_max > num_layers - 2:
        raise ConfigError(f"--greedy-ends keep never removes the first or the last of the {num_layers} layers, so "
                          f"{' and '.join(rescoring(settings))} cannot remove {k_max}: pass --max-removed "
                          f"{max(num_layers - 2, 1)} or less, or --greedy-ends allow.")


def check_strategies(settings: CurveSettings) -> None:
    bad = [s for s in settings.strategies if s not in STRATEGIES]
    if bad or not settings.strategies:
        raise ConfigError(f"Unknown --strategies {', '.join(bad) or '(none)'}: pick from {', '.join(STRATEGIES)}.")
    if settings.greedy_metric not in accepted_by(RESCORING):
        raise ConfigError(f"--greedy-metric {settings.greedy_metric}: use {' or '.join(accepted_by(RESCORING))}.")
    if settings.greedy_ends not in GREEDY_ENDS:
        raise ConfigError(f"--greedy-ends {settings.greedy_ends}: use {' or '.join(GREEDY_ENDS)}.")
    if not 0 < settings.keep <= 1:
        raise ConfigError(f"--keep {settings.keep}: use a fraction of the baseline in (0, 1], e.g. 0.95.")


@dataclasses.dataclass
class Choice:
    """What a strategy picks from (strategies.py: `reads`): the angular run's tables, the sweep, the sizes."""

    job: SweepJob
    num_layers: int
    k_max: int
    progress: Progress
    angular: Any = None  # runs.read.Run of the angular run, for strategies that read one


def angular_sets(choice: Choice) -> dict[int, list[int]]:
    """angular.csv (layer, n, distance) -> for each k, the block of k layers starting at argmin_l d(l, k)."""
    angular, k_max = choice.angular.tables["angular"], choice.k_max
    sets = {}
    for k in range(1, k_max + 1):
        rows = angular[angular["n"] == k].sort_values(["distance", "layer"])
        start = int(rows["layer"].iloc[0])
        sets[k] = list(range(start, start + k))
    return sets


def bi_sets(choice: Choice) -> dict[int, list[int]]:
    """layers.csv's block_influence -> for each k, the k blocks of smallest influence (ties: the earlier block)."""
    layers, num_layers, k_max = choice.angular.tables["layers"], choice.num_layers, choice.k_max
    if "block_influence" not in layers or layers["block_influence"].iloc[:num_layers].isna().any():
        raise RunError("The angular run has no block_influence column (written by an older layerprobe): run "
                       "`layerprobe angular` again, or drop bi from --strategies.")
    influence = layers["block_influence"].iloc[:num_layers].tolist()
    order = sorted(range(num_layers), key=lambda layer: (influence[layer], layer))
    return {k: sorted(order[:k]) for k in range(1, k_max + 1)}


def last_sets(choice: Choice) -> dict[int, list[int]]:
    return {k: list(range(choice.num_layers - k, choice.num_layers)) for k in range(1, choice.k_max + 1)}


def greedy_candidates(num_layers: int, chosen: list[int], ends: str) -> list[int]:
    """The layers greedy may remove next: every remaining one, or (ends='keep', SLEB's rule) all but the first and
    the last remaining block."""
    left = [c for c in range(num_layers) if c not in chosen]
    return left[1:-1] if ends == "keep" else left


def greedy_sets(choice: Choice) -> dict[int, list[int]]:
    """SLEB's loop on the probe corpus: at each step, of the layers left, remove the one whose removal (with those
    already removed) gives the lowest --greedy-metric against the unpruned model; ties go to the earlier layer.
    Every step is saved: a resumed curve continues from the last finished step."""
    job, k_max, progress = choice.job, choice.k_max, choice.progress
    config, probe, ledger = job.config, job.probe, job.ledger
    metric, ends = config.curve.greedy_metric, config.curve.greedy_ends
    chosen: list[int] = list(ledger.state.get("greedy", []))
    score = score_batch_shared if config.shared_prefix else score_batch_naive
    num_layers = len(probe.stack)
    stream = []  # the probe batches, tokenized once for every step
    if len(chosen) < k_max:
        stream = [b for b in batches(probe.corpus.texts(), probe.tokenizer, probe.seq_len, config.data.batch_size,
                                     config.data.tokens) if b.tokens]
        if not stream:
            raise empty_corpus_error(probe.corpus.spec)
    while len(chosen) < k_max:
        progress("greedy steps", len(chosen), k_max)
        candidates = {c: Variant.of([*chosen, c]) for c in greedy_candidates(num_layers, chosen, ends)}
        sums = Sums()
        for done, batch in enumerate(stream, 1):
            ids, mask = batch.input_ids.to(probe.device), batch.attention_mask.to(probe.device)
            score(probe.model, probe.stack, metric, list(candidates.values()), ids, mask, sums, config.part)
            # a step scores every candidate on every batch: minutes on a CPU, so its batches show too
            progress("greedy batches", len(chosen) * len(stream) + done, k_max * len(stream))
        values = {c: finish(metric, *sums.variants[v.label]) for c, v in candidates.items()}
        if not all(math.isfinite(v) for v in values.values()):
            raise NumericsError(f"The greedy strategy's {metric} is NaN or infinite at step {len(chosen) + 1} at "
                                f"{probe.loaded.dtype}: {numerics_fix(probe.loaded.dtype)}.")
        chosen.append(min(values, key=lambda c: (values[c], c)))
        ledger.save_state(greedy=chosen)
    progress("greedy steps", k_max, k_max)
    return {k: sorted(chosen[:k]) for k in range(1, k_max + 1)}


# ---- the angular run the angular and bi strategies read -------------------------------------------------------

def _angular_run(config: PruneConfig, probe: Probe, folder: Path, progress: Progress) -> Path:
    """--angular DIR, an angular run beside this one, or one measured now on the probe corpus into <run>/angular."""
    found = find_angular(folder, config.angular, probe.loaded.spec, probe.loaded.fingerprint(),
                         config.allow_other_weights)
    if found is not None:
        return found
    inner = folder / "angular"
    if is_run(inner):
        return inner  # measured before an interruption
    from layerprobe.commands.angular import COMMAND as ANGULAR
    from layerprobe.commands.angular.run import measure_into

    settings = AngularConfig(model=config.model, data=config.data, out=str(inner), overwrite=True, lens_tokens=0,
                             formats=config.formats)
    measure_into(prepare_run_dir(inner, overwrite=True, command=ANGULAR), settings, probe, progress)
    return inner


def _selection(config: PruneConfig, job: SweepJob, folder: Path, k_max: int, progress: Progress) -> tuple[dict, Path | None]:
    """strategy -> {k: ids}, and the angular run used (None when no strategy reads one)."""
    probe, num_layers = job.probe, len(job.probe.stack)
    strategies = config.curve.strategies
    choice = Choice(job, num_layers, k_max, progress)
    angular_dir = None
    if any(STRATEGIES[s].reads == "angular" for s in strategies):
        angular_dir = _angular_run(config, probe, folder, progress)
        choice.angular = load_run(angular_dir)
        if len(choice.angular.tables["layers"]) != num_layers + 1:
            raise RunError(f"The angular run {angular_dir} measured {len(choice.angular.tables['layers']) - 1} layers "
                           f"and this model has {num_layers}: pass --angular with a run of the same model.")
    return {s: STRATEGIES[s].pick(choice) for s in strategies}, angular_dir


def _healed_columns(found: tuple | None) -> dict:
    """CURVE_HEALED's values of one point from healed_intervals' (vs the healed reference, vs unhealed) pair."""
    if found is None:
        return dict.fromkeys(CURVE_HEALED, math.nan)
    to_reference, change = found
    return {"healed_delta": to_reference.delta, "healed_delta_lo": to_reference.lo,
            "healed_delta_hi": to_reference.hi, "heal_change": change.delta, "heal_change_lo": change.lo,
            "heal_change_hi": change.hi}


def curve_table(sets: dict, rows: list[dict], metric: str, higher: bool, keep: float, num_layers: int,
                healed: dict | None = None, keep_by: str = "bound", healed_found: dict | None = None) -> Any:
    """curve.csv: per strategy and k, the set removed and its score (and, with --heal, its healed score and the
    healed point's paired intervals, `healed_found`: evaluation.records.healed_intervals)."""
    import pandas as pd

    scored = {(str(r["removed"]), r["metric"]): r for r in rows}
    table = []
    for strategy, by_k in sets.items():
        for k, ids in by_k.items():
            row, label = scored[(Variant.of(ids).label, metric)], Variant.of(ids).label
            table.append({"strategy": strategy, "k": k, "fraction": k / num_layers, "removed": label,
                          "metric": metric, "baseline": row["baseline"], "score": row["pruned"],
                          "delta": row["delta"],
                          "within": within(metric, higher, row["baseline"], judged(row, higher, keep_by), keep),
                          "healed_score": (healed or {}).get(label, math.nan),
                          **{c: row.get(c, False if c == "significant" else 0 if c == "family" else math.nan)
                             for c in CURVE_PAIRED},
                          **_healed_columns((healed_found or {}).get(label))})
    return pd.DataFrame(table, columns=CURVE_COLUMNS + CURVE_PAIRED + CURVE_HEALED)


def check_intervals(config: PruneConfig, seq_len: int, task: Any = None) -> None:
    """--keep-by bound judges each k at the worse end of its paired interval: a task-free curve on one sequence, or an
    lm-eval curve whose built task scores one document (--limit 1, --sample 1, a one-document task: `task`'s
    harness splits know it before scoring), has none, so it is refused before anything is measured (issue 47 rule 5;
    an lm-eval curve with 2 to MIN_DOCUMENTS - 1 documents judges no k and says so, decide.curve_decisions)."""
    if config.curve.keep_by != "bound":
        return
    if task_kind(config.task) == "taskfree" and config.data.tokens <= seq_len:
        raise ConfigError(f"--keep-by bound judges each k at the worse end of its paired interval, and --tokens "
                          f"{config.data.tokens} at --seq-len {seq_len} is one sequence, which has no interval: pass "
                          f"--tokens of at least {2 * seq_len} (more than one sequence), or --keep-by point.")
    splits = getattr(getattr(task, "harness", None), "splits", None) or {}
    scored = [split.get("scored") for split in splits.values()]
    if scored and None not in scored and sum(scored) == 1:
        chose = (f"--limit {config.limit:g}" if config.limit is not None else
                 f"--sample {config.sample}" if config.sample is not None else "the task itself")
        raise ConfigError(f"--keep-by bound judges each k at the worse end of its paired interval, and task "
                          f"'{config.task}' scores one document ({chose}), which has no interval: score more "
                          "documents (10 or more to test a k; a larger --limit or --sample), or pass --keep-by point.")


def curve_figure(table: Any, summary: dict) -> Any:
    """The curve's figure from its table and summary (model, task, part, num_layers, metric, baseline, chance, keep,
    healed_baseline): the run's own, and rederive's after the intervals are recomputed."""
    metric, baseline, part = summary["metric"], summary["baseline"], summary.get("part", "block")
    edge = tolerance_edge(metric, summary["higher_is_better"], baseline, summary["keep"])
    title = (f"{model_label(summary['model'])}: {summary['task']}{' (' + part + ' sub-layers)' if part != 'block' else ''}, "
             f"{summary['num_layers']} layers")
    return curve_plot(table, metric, baseline, summary.get("chance"), edge, title,
                      healed_baseline=summary.get("healed_baseline"))


@takes(PruneConfig, "layerprobe.curve")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_curve(config: PruneConfig, progress: Progress = silent) -> CurveRun:
    """Pick, per strategy and k, the layers to remove; score each distinct set on the task; write the curve."""
    import pandas as pd
    import torch

    started, clock = start_time(), time.perf_counter()
    settings = config.curve
    check_strategies(settings)
    check_healing(config)
    if config.part not in PARTS:
        raise ConfigError(f"Unknown --part '{config.part}': use {', '.join(PARTS)}.")
    if config.shard or config.layers or config.block != 1:
        raise ConfigError("--curve picks its own layer sets: drop --shard, --layers and --block.")
    out = CURVE_COMMAND.out(config, config.model.model)
    if config.resume:  # before the folder or the model is touched
        check_resume(Path(out), CURVE_COMMAND, config, finished_resumes=True)
    elif config.overwrite:  # refused before the model loads, not after
        check_owned(Path(out), CURVE_COMMAND, "--overwrite")
    task, probe = open_sweep(config, need_corpus=any(STRATEGIES[s].reads for s in settings.strategies))
    warnings = probe.warnings + task.check(probe)
    check_intervals(config, probe.seq_len, task)
    check_foldable(config, probe)
    rescores = rescoring(settings)  # greedy: picks by scoring the probe corpus with --greedy-metric
    if rescores and METRICS[settings.greedy_metric].needs_lm and is_encoder(probe.model):
        others = [s.name for s in STRATEGIES.values() if not s.rescores]
        raise ConfigError(f"--strategies {' and '.join(rescores)} picks layers by {settings.greedy_metric}, which "
                          f"needs a causal LM, and '{probe.loaded.spec}' is an encoder: drop {' and '.join(rescores)} "
                          f"({', '.join(others[:-1])} and {others[-1]} need no LM head).")
    num_layers = len(probe.stack)
    k_max = largest_k(settings, num_layers)
    check_greedy_room(settings, k_max, num_layers)
    folder = prepare_run_dir(out, config.overwrite, config.resume, CURVE_COMMAND)
    facts = probe.facts()
    identity = probe.identity(config, k_max=k_max)
    ledger = Ledger(folder, identity, config.resume, COLUMNS, table="scores")
    job = SweepJob(config, probe, [], ledger, progress, warnings)
    with torch.inference_mode():
        sets, angular_dir = _selection(config, job, folder, k_max, progress)
        distinct = {Variant.of(ids) for by_k in sets.values() for ids in by_k.values()}  # shared sets once
        job.variants = sorted(distinct, key=lambda v: (v.block, v.removed))
        higher = task.run(job)
    healing_started = time.perf_counter()
    healed = heal_sets(config, probe, job.variants, ledger, progress)  # outside inference mode: it trains
    heal_seconds = time.perf_counter() - healing_started
    warnings += refusals(ledger)
    metric = check_metric(config.metric, list(dict.fromkeys(r["metric"] for r in ledger.rows)))
    scores = with_records(folder, pd.DataFrame(ledger.rows, columns=COLUMNS), ledger.records, config.task,
                          task.facts(job).get("groups"), metric, config.family, config.cluster)
    estimand = interval_estimand(ledger.records, metric, config.task, task.facts(job).get("groups"), config.cluster)
    healed_found = healed_intervals(ledger.records, metric, [v.label for v in job.variants]) if healed else None
    table = curve_table(sets, scores.to_dict("records"), metric, higher, settings.keep, num_layers, healed,
                        settings.keep_by, healed_found)
    baseline = float(table["baseline"].iloc[0])
    chance = chance_of(config.task, metric)  # drawn as a line on the plot
    if task.needs_corpus and rescores:
        warnings.append(f"{' and '.join(rescores)} chose its layers by {settings.greedy_metric} on the same probe "
                        "tokens the curve is scored on; score it on another task or corpus for a held-out comparison.")
    facts |= {"task": config.task, "part": config.part, "sublayer": config.sublayer, **task.facts(job)}
    seconds = time.perf_counter() - clock + float(ledger.state.get("seconds_before", 0.0))
    summary = {**facts, "metric": metric, "higher_is_better": higher, "baseline": baseline,
               "chance": chance, "keep": settings.keep, "keep_by": settings.keep_by, "max_removed": k_max, "strategies": list(settings.strategies),
               "greedy_metric": settings.greedy_metric if rescores else None,
               "greedy_ends": settings.greedy_ends if rescores else None,
               "angular_run": str(angular_dir) if angular_dir else None, "sets_scored": len(job.variants),
               "heal_steps": settings.heal_steps, "heal": heal_method(config), "healed_baseline": healed.get(UNPRUNED),
               "heal_seconds": round(heal_seconds, 3) if healed else None,
               "records": "samples.csv.gz" if ledger.records else None, "correction": CORRECTION,
               **curve_decisions(table, ledger.records, config.task, metric, higher, settings.keep, settings.keep_by,
                                 scores, estimand),
               "interval_estimand": estimand,
               "seconds": round(seconds, 3), "warnings": warnings}
    figure = curve_figure(table, {**summary, "model": facts["model"], "task": config.task, "part": config.part,
                                  "num_layers": num_layers})
    return write_run(folder, CURVE_COMMAND, tables={"curve": table, "scores": scores},
                     figures={"curve": figure}, summary=summary, config=config, started=started, seconds=seconds,
                     facts=facts, formats=config.formats, warnings=warnings)
