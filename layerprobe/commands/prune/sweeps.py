"""One Sweep per task kind (task-free metrics, SQuAD, lm-eval), picked from SWEEPS: each builds what it needs
before the model loads, checks the loaded model, scores the baseline and every variant into the Ledger, and
says what the run's facts are."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.commands.prune.outputs import check_metric
from layerprobe.config import PruneConfig
from layerprobe.data.packing import batches, empty_corpus_error
from layerprobe.errors import ConfigError, NumericsError, TaskError, numerics_fix
from layerprobe.evaluation.harness import FEWSHOT_SEED, SAMPLE_DRAW, SEED, check_sample
from layerprobe.evaluation.records import UNPRUNED, sequence_rows
from layerprobe.evaluation.metric import TASK, accepted_by
from layerprobe.evaluation.taskfree import METRICS, Sums, finish, score_batch_naive, score_batch_shared
from layerprobe.evaluation.variants import Variant
from layerprobe.models.layers import is_encoder
from layerprobe.models.surgery import removed
from layerprobe.progress import Progress
from layerprobe.runs.paths import portable_path
from layerprobe.runs.resume import Ledger


def task_kind(task: str) -> str:
    if task in accepted_by(TASK):
        return "taskfree"
    return "squad" if task == "squad" else "lm-eval"


def rows_for(variant: Variant, baseline: dict, pruned: dict) -> list[dict]:
    return [
        {"layer": variant.start, "block": variant.block, "removed": variant.label, "metric": name,
         "baseline": base, "pruned": pruned[name][0], "delta": pruned[name][0] - base,
         "baseline_stderr": base_err, "pruned_stderr": pruned[name][1]}
        for name, (base, base_err) in baseline.items()
    ]


@dataclass
class SweepJob:
    """What every sweep works on: the settings, the loaded probe, the variants left to this process, the store."""

    config: PruneConfig
    probe: Any  # commands.probe.Probe
    variants: list[Variant]
    ledger: Ledger
    progress: Progress
    warnings: list[str] = field(default_factory=list)


def evaluate_variants(evaluate, subject, job: SweepJob, select=None, records=None) -> dict:
    """Baseline once, then evaluate(subject) with each variant's layers removed; returns the baseline.

    select(label) runs before each evaluation (None: the unpruned model), for LMs that answer variants;
    records() gives the last evaluation's per-document records (evaluation/records.py), saved with its scores.
    """
    select = select or (lambda label: None)
    records = records or (lambda: [])
    ledger, variants, progress = job.ledger, job.variants, job.progress
    baseline = ledger.state.get("baseline")
    if baseline is None:
        select(None)
        baseline = evaluate(subject)
        _check_scores(baseline, None, job.probe.loaded)
        ledger.add_records(UNPRUNED, records())
        ledger.save_state(baseline=baseline)
    baseline = {k: tuple(v) for k, v in baseline.items()}
    done = ledger.done()
    for count, variant in enumerate(variants):
        progress("variants", count, len(variants))
        if variant.label in done:
            continue
        select(variant.label)
        with removed(job.probe.model, variant.removed, job.config.part, job.probe.stack):
            pruned = evaluate(subject)
        _check_scores(pruned, variant.label, job.probe.loaded)  # before it is saved: a NaN is never ranked
        ledger.add_records(variant.label, records())
        ledger.add(rows_for(variant, baseline, pruned))
    progress("variants", len(variants), len(variants))
    return baseline


def _check_scores(scores: dict, label: str | None, loaded: Any) -> None:
    """Every score of an evaluation (lm-eval, SQuAD) is a finite number: else one line naming the checkpoint."""
    bad = sorted(name for name, (value, _) in scores.items()
                 if isinstance(value, (int, float)) and not math.isfinite(value))
    if bad:
        who = "the unpruned model" if label is None else f"the model without layer(s) {label}"
        raise NumericsError(f"'{loaded.spec}' scores a NaN or infinite {', '.join(bad)} as {who} at "
                            f"{loaded.dtype}: {numerics_fix(loaded.dtype)}.")


def _check_finite(sums: Sums, metric: str, batch: int, loaded: Any) -> None:
    dtype = loaded.dtype
    if not math.isfinite(sums.baseline[0]):
        raise NumericsError(f"The unpruned model '{loaded.spec}' gives a NaN or infinite {metric} in batch {batch} "
                            f"at {dtype}: {numerics_fix(dtype)}.")
    bad = next((label for label, (total, _) in sums.variants.items() if not math.isfinite(total)), None)
    if bad is not None:
        raise NumericsError(f"Removing layer(s) {bad} of '{loaded.spec}' gives a NaN or infinite {metric} in batch "
                            f"{batch} at {dtype}: {numerics_fix(dtype)}.")


class TaskfreeSweep:
    """ppl / kl / drift on the probe corpus: every variant scored per batch (shared prefix by default)."""

    needs_corpus = True

    def __init__(self, config: PruneConfig) -> None:
        self.config = config

    @property
    def head(self) -> str:
        return METRICS[self.config.task].head

    def check(self, probe: Any) -> list[str]:
        if METRICS[self.config.task].needs_lm and is_encoder(probe.model):
            others = " or ".join(m.name for m in METRICS.values() if TASK in m.accepted_by and not m.needs_lm)
            raise TaskError(f"--task {self.config.task} needs a causal LM, and '{probe.loaded.spec}' is an encoder: "
                            f"use --task {others}.")
        return []

    def run(self, job: SweepJob) -> bool:
        config, probe, ledger, metric = self.config, job.probe, job.ledger, self.config.task
        state = ledger.state.get("sums")
        sums = Sums(**state) if state else Sums()
        score = score_batch_shared if config.shared_prefix else score_batch_naive
        total = config.data.tokens
        tokens = ledger.state.get("tokens", 0)
        job.progress("tokens", tokens, total)
        stream = batches(probe.corpus.texts(), probe.tokenizer, probe.seq_len, config.data.batch_size, total)
        for index, batch in enumerate(stream):
            if index < sums.batches:
                continue  # finished before an interruption; the stream is deterministic
            ids, mask = batch.input_ids.to(probe.device), batch.attention_mask.to(probe.device)
            # progress inside the batch, one step per variant (a short sweep is one or two batches)
            def tick(scored: int, before: int = tokens, size: int = batch.tokens) -> None:
                job.progress("tokens", before + size * scored // (len(job.variants) + 1), total)

            score(probe.model, probe.stack, metric, job.variants, ids, mask, sums, config.part, tick)
            _check_finite(sums, metric, index, probe.loaded)  # before saving: finished batches stay valid
            sums.batches += 1
            tokens += batch.tokens
            ledger.save_state(sums=sums.__dict__, tokens=tokens)
            job.progress("tokens", tokens, total)
        if tokens == 0:
            raise empty_corpus_error(probe.corpus.spec)
        if tokens < total:
            job.warnings.append(f"The corpus ran out: used {tokens} tokens of the {total} asked for.")
        baseline = {metric: (finish(metric, *sums.baseline), None)}
        rows = []
        for variant in job.variants:
            if variant.label not in ledger.done():
                rows += rows_for(variant, baseline, {metric: (finish(metric, *sums.variants[variant.label]), None)})
        self._records(job, sums, rows)
        ledger.add(rows)
        return METRICS[metric].higher_is_better

    def _records(self, job: SweepJob, sums: Sums, rows: list[dict]) -> None:
        """Each sequence's sum and positions, per variant scored now and for the unpruned model (kl and drift: 0,
        by definition, over the same positions)."""
        metric, scored = self.config.task, [str(r["removed"]) for r in rows]
        if not scored:
            return
        unpruned = sums.sequences.get("") or [[0.0, n] for _, n in sums.sequences.get(scored[0], [])]
        job.ledger.add_records(UNPRUNED, sequence_rows(metric, unpruned))
        for label in scored:
            job.ledger.add_records(label, sequence_rows(metric, sums.sequences.get(label, [])))

    def facts(self, job: SweepJob) -> dict:
        return {"dataset": job.probe.corpus.description, "tokens": job.ledger.state.get("tokens"),
                "seq_len": job.probe.seq_len}


class SquadSweep:
    """SQuAD v1.1 exact match and F1 of an extractive-QA model."""

    head = "qa"
    needs_corpus = False

    def __init__(self, config: PruneConfig) -> None:
        from layerprobe.evaluation.squad import SquadTask

        if config.limit is not None and config.limit <= 0:
            raise ConfigError(f"--limit must be positive, got {config.limit}.")
        self.config = config
        self.task = SquadTask(config.data.dataset, config.limit, config.data.batch_size).build()

    def check(self, probe: Any) -> list[str]:
        if probe.loaded.new_head:
            raise TaskError(
                f"squad needs a trained question-answering head and '{probe.loaded.spec}' has none "
                f"({', '.join(probe.loaded.new_head)} missing): fine-tune it on SQuAD or pass a QA checkpoint."
            )
        return self.task.prepare(probe.model, probe.tokenizer)

    def run(self, job: SweepJob) -> bool:
        evaluate_variants(self.task.evaluate, job.probe.model, job, records=lambda: self.task.records)
        return True

    def facts(self, job: SweepJob) -> dict:
        squad = self.task
        return {"dataset": self.config.data.dataset, "questions": len(squad.questions),
                "windows": len(squad.windows.input_ids), "limit": self.config.limit, "max_length": squad.max_length,
                "doc_stride": squad.stride}


class HarnessSweep:
    """Any lm-eval task or group; loglikelihood requests of all variants answered from one shared-prefix pass."""

    head = "causal-lm"
    needs_corpus = False

    def __init__(self, config: PruneConfig) -> None:
        from layerprobe.evaluation.harness import HarnessTask

        self.config = config  # tasks are built before the model loads: a bad name fails in seconds
        check_sample(config.sample, config.limit)  # before the task index (~20 s) is built
        include_path = config.include_path
        if config.mmlu_data is not None:
            include_path = self._local_mmlu(config)
        from layerprobe.evaluation.local_data import default_task_data

        self.task_data = None if config.mmlu_data else default_task_data(config.task_data)
        self.harness = HarnessTask(config.task, include_path, config.num_fewshot, config.limit,
                                   task_data=self.task_data, sample=config.sample, sample_seed=config.seed).build()

    def _local_mmlu(self, config: PruneConfig) -> str:
        """lm-eval's MMLU tasks over the named local file, written to a folder that lives as long as the sweep."""
        import tempfile

        from layerprobe.evaluation.mmlu import write_local_tasks

        if not config.task.startswith("mmlu"):
            raise ConfigError(f"--mmlu-data serves the MMLU tasks (mmlu, mmlu_stem, mmlu_anatomy, ...), not "
                              f"'{config.task}': drop --mmlu-data or pass an MMLU task.")
        if config.include_path is not None:
            raise ConfigError("--mmlu-data writes its own task folder: drop --include-path.")
        self._tasks = tempfile.TemporaryDirectory(prefix="layerprobe-mmlu-")
        return str(write_local_tasks(Path(config.mmlu_data), Path(self._tasks.name), config.num_fewshot))

    def check(self, probe: Any) -> list[str]:
        if is_encoder(probe.model):
            raise TaskError(f"Task '{self.config.task}' needs a causal LM, and '{probe.loaded.spec}' is an encoder: "
                            "use drift or squad.")
        if getattr(probe.model.config, "is_encoder_decoder", False):
            raise TaskError(f"Task '{self.config.task}' needs a causal LM, and '{probe.loaded.spec}' is an "
                            "encoder-decoder: use --task kl, ppl or drift with --stack encoder or decoder.")
        return list(self.harness.notes)

    def run(self, job: SweepJob) -> bool:
        from layerprobe.evaluation.harness import wrap_model

        config, harness, ledger = self.config, self.harness, job.ledger
        shared = config.shared_prefix and harness.output_types != {"generate_until"}
        left = [v for v in job.variants if v.label not in ledger.done()]  # all of them unless resumed
        lm = wrap_model(job.probe.model, job.probe.tokenizer, config.data.batch_size, job.probe.stack,
                        left if shared else None, config.max_memory, config.part, config.prefix_cache)

        def select(label: str | None) -> None:
            if shared:
                lm.active = label

        if shared and left:  # the pass that scores every variant is most of the work: its own progress and saves
            lm.tick = lambda done, total: job.progress("request tokens, every variant scored in one pass", done, total)
            lm.resume_pass(ledger.state.get("shared_pass"))
            lm.save = lambda state: ledger.save_state(shared_pass=state)

        if shared and left and ledger.state.get("baseline") is not None:
            # resumed after the baseline: one shared pass stores the remaining variants' answers again (the saved
            # baseline is kept), and they are answered from it as in an uninterrupted sweep
            select(None)
            harness.evaluate(lm)
        baseline = evaluate_variants(harness.evaluate, lm, job, select, records=lambda: harness.records)
        if shared and "generate_until" in harness.output_types:
            job.warnings.append("Generation requests (generate_until) were scored per variant; loglikelihood "
                                "requests shared the prefix.")
        if shared and getattr(lm, "chosen", None):
            ledger.state["shared_prefix"] = lm.chosen
            if lm.chosen["batch_size"] < lm.chosen["asked"]:
                job.warnings.append(f"Shared prefix: batch {lm.chosen['batch_size']} instead of {lm.chosen['asked']}, "
                                    f"so the stored block inputs fit {lm.chosen['budget_gib']} GiB (--max-memory).")
        ledger.state["prefix_cache"] = lm.prefix_cache() if shared and left else ledger.state.get("prefix_cache") or {
            "path": "per variant", "reason": "--no-shared-prefix" if not config.shared_prefix else
            "generation requests only" if shared else "no variant left to score"}
        if ledger.state.pop("shared_pass", None) is not None:  # every variant scored: its answers (MBs on MMLU)
            ledger.save_state()  # are no longer needed to resume; the batch it chose is kept
        metric = check_metric(config.metric, list(baseline))
        return bool(harness.higher_is_better().get(metric.split("[")[0], True))

    def facts(self, job: SweepJob) -> dict:
        return {"num_fewshot": self.harness.fewshot_used(), "num_fewshot_by_task": self.harness.fewshot or None,
                "limit": self.config.limit, "seed": SEED, "fewshot_seed": FEWSHOT_SEED, "shared_prefix": job.ledger.state.get("shared_prefix"),
                "prefix_cache": job.ledger.state.get("prefix_cache"),
                "mmlu_data": self.config.mmlu_data, "task_data": portable_path(self.task_data) if self.task_data else None,
                "splits": self.harness.splits, "groups": self.harness.groups or None,
                "sample": {"n": self.config.sample, "seed": self.config.seed, "draw": SAMPLE_DRAW,
                           "documents": self.harness.sampled} if self.config.sample else None}


SWEEPS = {"taskfree": TaskfreeSweep, "squad": SquadSweep, "lm-eval": HarnessSweep}


def make_sweep(config: PruneConfig):
    """The sweep for --task, with what it builds before any model is loaded."""
    return SWEEPS[task_kind(config.task)](config)


def open_sweep(config: PruneConfig, need_corpus: bool = False) -> tuple[Any, Any]:
    """(sweep, probe): the task is built beside the other cheap checks, so every problem is named at once before
    the model loads; need_corpus: the probe corpus is needed even when the task scores without it (curves)."""
    from layerprobe.commands.probe import open_probe, preflight

    kind = task_kind(config.task)
    head = METRICS[config.task].head if kind == "taskfree" else SWEEPS[kind].head  # what the cheap checks look for
    need_corpus = need_corpus or SWEEPS[kind].needs_corpus
    corpus, task = preflight(config.model, config.data, head, need_corpus, more=(lambda: make_sweep(config),))
    probe = open_probe(config.model, config.data, head=task.head, need_corpus=need_corpus, checked=(corpus,))
    probe.stack.sublayer = config.sublayer
    return task, probe
