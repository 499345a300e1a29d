"""run_prune(config): remove one layer (or a block) at a time and measure dP = P_pruned - P_original."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.config import PruneConfig
from layerprobe.errors import ConfigError, TaskError
from layerprobe.evaluation.variants import Variant, parse_layers, parse_shard, shard_of, shard_suffix, sweep
from layerprobe.progress import Progress, silent

log = logging.getLogger(__name__)

COLUMNS = ["layer", "block", "removed", "metric", "baseline", "pruned", "delta", "baseline_stderr", "pruned_stderr"]
PREFERRED = ("acc", "acc_norm", "f1", "exact_match", "ppl", "kl", "drift")


@dataclass
class PruneRun:
    """What `layerprobe prune` produced."""

    folder: Path
    table: Any  # DataFrame with COLUMNS
    summary: dict
    warnings: list[str] = field(default_factory=list)


def task_kind(task: str) -> str:
    from layerprobe.evaluation.taskfree import METRICS

    if task in METRICS:
        return "taskfree"
    return "squad" if task == "squad" else "lm-eval"


def head_for(task: str) -> str:
    from layerprobe.evaluation.taskfree import METRICS

    kind = task_kind(task)
    return METRICS[task][0] if kind == "taskfree" else ("qa" if kind == "squad" else "causal-lm")


class Ledger:
    """prune.csv and the resume state, rewritten atomically after every finished variant or batch."""

    def __init__(self, folder: Path, identity: dict, resume: bool) -> None:
        import pandas as pd

        from layerprobe.runs.folder import check_same_settings, read_json

        self.folder, self.identity = folder, identity
        self.rows: list[dict] = []
        self.state: dict = {}
        state_file = folder / "state.json"
        if resume and state_file.exists():
            self.state = read_json(state_file)
            check_same_settings(folder, self.state.get("identity", {}), identity)
            if (folder / "prune.csv").exists():
                self.rows = pd.read_csv(folder / "prune.csv").to_dict("records")

    def done(self) -> set[str]:
        return {str(r["removed"]) for r in self.rows}

    def save_state(self, **state: Any) -> None:
        from layerprobe.runs.folder import write_json

        self.state.update(state, identity=self.identity)
        write_json(self.folder / "state.json", self.state)

    def add(self, rows: list[dict]) -> None:
        import pandas as pd

        from layerprobe.runs.folder import write_csv

        self.rows.extend(rows)
        write_csv(self.folder / "prune.csv", pd.DataFrame(self.rows, columns=COLUMNS))


def rows_for(variant: Variant, baseline: dict, pruned: dict) -> list[dict]:
    return [
        {"layer": variant.start, "block": variant.block, "removed": variant.label, "metric": name,
         "baseline": base, "pruned": pruned[name][0], "delta": pruned[name][0] - base,
         "baseline_stderr": base_err, "pruned_stderr": pruned[name][1]}
        for name, (base, base_err) in baseline.items()
    ]


def run_prune(config: PruneConfig, progress: Progress = silent) -> PruneRun:
    """The sweep: baseline once, then each variant; finished work is on disk after every step."""
    import torch

    from layerprobe.angular import model_facts, prepare_probe
    from layerprobe.distributed import current_world
    from layerprobe.models.layers import is_encoder
    from layerprobe.runs.folder import prepare_run_dir, slug
    from layerprobe.runs.manifest import start_time

    started, clock = start_time(), time.perf_counter()
    kind = task_kind(config.task)
    shard = parse_shard(config.shard)
    world = current_world()
    world.refuse_device_map(config.model.device_map)
    if world.size > 1:  # torchrun: rank r sweeps shard r+1 of N on its own device, rank 0 merges at the end
        if shard:
            raise ConfigError("--shard under torchrun: torchrun already splits the sweep over its processes; drop "
                              "--shard, or run N separate processes with --shard K/N.")
        shard = (world.rank + 1, world.size)
        config = dataclasses.replace(config, shard=f"{shard[0]}/{shard[1]}",
                                     model=dataclasses.replace(config.model, device=world.device(config.model.device)))
        progress = progress if world.main else silent
    harness = squad = None
    if kind == "lm-eval":  # build tasks before loading the model: a bad name fails in seconds
        from layerprobe.evaluation.harness import HarnessTask

        harness = HarnessTask(config.task, config.include_path, config.num_fewshot, config.limit).build()
    elif kind == "squad":
        from layerprobe.evaluation.squad import SquadTask

        if config.limit is not None and config.limit <= 0:
            raise ConfigError(f"--limit must be positive, got {config.limit}.")
        squad = SquadTask(config.data.dataset, config.limit, config.data.batch_size).build()
    corpus, loaded, stack, seq_len, warnings = prepare_probe(
        config.model, config.data, head=head_for(config.task), need_corpus=kind == "taskfree"
    )
    model = loaded.model
    if kind == "lm-eval" and is_encoder(model):
        raise TaskError(f"Task '{config.task}' needs a causal LM, and '{loaded.spec}' is an encoder: use drift or squad.")
    if config.task in ("ppl", "kl") and is_encoder(model):
        raise TaskError(f"--task {config.task} needs a causal LM, and '{loaded.spec}' is an encoder: use --task drift.")
    if kind == "squad":
        if loaded.new_head:
            raise TaskError(
                f"squad needs a trained question-answering head and '{loaded.spec}' has none "
                f"({', '.join(loaded.new_head)} missing): fine-tune it on SQuAD or pass a QA checkpoint."
            )
        warnings += squad.prepare(model, loaded.tokenizer)
    variants = sweep(len(stack), config.block, parse_layers(config.layers, len(stack)))
    sweep_size = len(variants)
    world.refuse_idle(sweep_size, "variants")
    if shard:
        variants = shard_of(variants, *shard)

    base = config.out or str(Path("reports") / slug(loaded.spec) / f"prune-{slug(config.task)}")
    out = base + shard_suffix(config.shard) if world.size > 1 or not config.out else config.out
    folder = prepare_run_dir(out, overwrite=config.overwrite, resume=config.resume)
    identity = {"task": config.task, "model": loaded.spec, "block": config.block, "layers": config.layers,
                "num_fewshot": config.num_fewshot, "limit": config.limit, "dataset": config.data.dataset,
                "tokens": config.data.tokens, "seq_len": seq_len, "shard": config.shard}
    ledger = Ledger(folder, identity, config.resume)
    with torch.inference_mode():
        if kind == "taskfree":
            higher = False
            _sweep_taskfree(config, corpus, loaded, stack, seq_len, variants, ledger, progress, warnings)
        elif kind == "squad":
            _sweep_evaluations(squad.evaluate, loaded.model, loaded.model, stack, variants, ledger, progress)
            higher = True
        else:
            higher = _sweep_harness(config, harness, loaded, stack, variants, ledger, progress, warnings)
    seconds = time.perf_counter() - clock
    facts = model_facts(loaded, stack) | {"task": config.task}
    if shard:  # what `layerprobe merge` checks: every slice present once, all of the same sweep
        facts["shard"] = {"index": shard[0], "count": shard[1], "sweep_variants": sweep_size,
                          "variants": [v.label for v in variants]}
    if kind == "taskfree":
        facts |= {"dataset": corpus.description, "tokens": ledger.state.get("tokens"), "seq_len": seq_len}
    elif kind == "squad":
        facts |= {"dataset": config.data.dataset, "questions": len(squad.questions), "windows": len(squad.windows.input_ids),
                  "limit": config.limit, "max_length": squad.max_length, "doc_stride": squad.stride}
    else:
        facts |= {"num_fewshot": config.num_fewshot, "limit": config.limit, "seed": 1234, "fewshot_seed": 1234,
                  "shared_prefix": ledger.state.get("shared_prefix")}
    from layerprobe.prune_report import write_prune_outputs

    run = write_prune_outputs(folder, ledger.rows, config, facts, higher, started, seconds, warnings)
    if world.size == 1:
        return run
    folders = world.gather(str(run.folder))  # also waits for every rank's shard
    if not world.main:
        return PruneRun(None, None, {}, warnings)
    from layerprobe.runs.merge import merge_shards

    return merge_shards(folders, base, overwrite=config.overwrite, formats=config.formats)


def _sweep_taskfree(config, corpus, loaded, stack, seq_len, variants, ledger, progress, warnings) -> None:
    from layerprobe.data.packing import batches, empty_corpus_error
    from layerprobe.evaluation.taskfree import Sums, finish, score_batch_naive, score_batch_shared

    metric = config.task
    state = ledger.state.get("sums")
    sums = Sums(**state) if state else Sums()
    score = score_batch_shared if config.shared_prefix else score_batch_naive
    model, device, total = loaded.model, loaded.device, config.data.tokens
    tokens = ledger.state.get("tokens", 0)
    progress("tokens", tokens, total)
    stream = batches(corpus.texts(), loaded.tokenizer, seq_len, config.data.batch_size, total)
    for index, batch in enumerate(stream):
        if index < sums.batches:
            continue  # finished before an interruption; the stream is deterministic
        ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
        score(model, stack, metric, variants, ids, mask, sums)
        sums.batches += 1
        tokens += batch.tokens
        ledger.save_state(sums=sums.__dict__, tokens=tokens)
        progress("tokens", tokens, total)
    if tokens == 0:
        raise empty_corpus_error(corpus.spec)
    if tokens < total:
        warnings.append(f"The corpus ran out: used {tokens} tokens of the {total} asked for.")
    baseline = {metric: (finish(metric, *sums.baseline), None)}
    rows = []
    for variant in variants:
        if variant.label not in ledger.done():
            value = finish(metric, *sums.variants[variant.label])
            rows += rows_for(variant, baseline, {metric: (value, None)})
    ledger.add(rows)


def _sweep_harness(config, harness, loaded, stack, variants, ledger, progress, warnings) -> bool:
    from layerprobe.evaluation.harness import wrap_model

    shared = config.shared_prefix and harness.output_types != {"generate_until"}
    lm = wrap_model(loaded.model, loaded.tokenizer, config.data.batch_size, stack, variants if shared else None,
                    config.max_memory)

    def select(label: str | None) -> None:
        if shared:
            lm.active = label

    # resumed after the baseline: the store of variant answers is gone, the rest is scored per variant
    resumed = ledger.state.get("baseline") is not None and len(ledger.done()) < len(variants)
    baseline = _sweep_evaluations(harness.evaluate, lm, loaded.model, stack, variants, ledger, progress, select)
    if shared and "generate_until" in harness.output_types:
        warnings.append("Generation requests (generate_until) were scored per variant; loglikelihood requests "
                        "shared the prefix.")
    if shared and getattr(lm, "chosen", None):
        ledger.state["shared_prefix"] = lm.chosen
        if lm.chosen["batch_size"] < lm.chosen["asked"]:
            warnings.append(f"Shared prefix: batch {lm.chosen['batch_size']} instead of {lm.chosen['asked']}, so the "
                            f"stored block inputs fit {lm.chosen['budget_gib']} GiB (--max-memory).")
    if shared and resumed:
        warnings.append("Resumed after the baseline: the remaining variants were scored per variant.")
    directions = harness.higher_is_better()
    metric = check_metric(config.metric, list(baseline))
    return bool(directions.get(metric.split("[")[0], True))


def _sweep_evaluations(evaluate, subject, model, stack, variants, ledger, progress, select=None) -> dict:
    """Baseline once, then evaluate(subject) with each variant's layers removed from model; returns the baseline.

    select(label) runs before each evaluation (None: the unpruned model), for LMs that answer variants.
    """
    from layerprobe.models.surgery import removed_layers

    select = select or (lambda label: None)
    baseline = ledger.state.get("baseline")
    if baseline is None:
        progress("variants", 0, len(variants))
        select(None)
        baseline = evaluate(subject)
        ledger.save_state(baseline=baseline)
    baseline = {k: tuple(v) for k, v in baseline.items()}
    done = ledger.done()
    for count, variant in enumerate(variants):
        progress("variants", count, len(variants))
        if variant.label in done:
            continue
        select(variant.label)
        with removed_layers(model, variant.removed, stack):
            pruned = evaluate(subject)
        ledger.add(rows_for(variant, baseline, pruned))
    progress("variants", len(variants), len(variants))
    return baseline


def check_metric(metric: str | None, available: list[str]) -> str:
    if metric is None:
        return next((m for m in PREFERRED if m in available), available[0])
    if metric not in available:
        raise ConfigError(f"--metric '{metric}' is not reported by this task: pick one of {', '.join(available)}.")
    return metric
