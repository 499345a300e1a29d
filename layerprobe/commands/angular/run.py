"""run_angular(config): stream tokens through the model, hook block inputs, write the run folder."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from layerprobe.commands.angular import COMMAND
from layerprobe.commands.probe import open_probe, preflight
from layerprobe.config import AngularConfig
from layerprobe.data.packing import batches, empty_corpus_error
from layerprobe.distributed import current_world
from layerprobe.errors import ConfigError, LayerprobeError, NumericsError, numerics_fix
from layerprobe.evaluation.variants import ranges_label
from layerprobe.hooks import BlockCapture
from layerprobe.metrics.angular import AngularAccumulator
from layerprobe.metrics.lens import LensAccumulator, default_lens_tokens
from layerprobe.metrics.router import RouterAccumulator
from layerprobe.metrics.stats import effective_rank
from layerprobe.models.device_map import peak_memory_gib, reset_peak_memory
from layerprobe.models.layers import ENCODER_MODEL_TYPES
from layerprobe.models.load import peek_model_type
from layerprobe.models.surgery import tail_only
from layerprobe.plots.heatmap import angular_heatmap
from layerprobe.progress import Progress, silent
from layerprobe.runs.columns import LAYERS as LAYER_COLUMNS
from layerprobe.runs.columns import names as column_names
from layerprobe.runs.folder import abandons_on_error, model_label, prepare_run_dir
from layerprobe.runs.resume import PassCheckpoint, check_resume
from layerprobe.runs.manifest import start_time
from layerprobe.runs.write import RunResult, write_run
from layerprobe.config import POSITIONS  # declared once, with the settings that take it
from layerprobe.settings import takes

RANK_SAMPLE = 2048  # token vectors per layer for the effective rank in layers.csv
LENS_STAGE = "logit lens (positions)"  # the lens's own progress stage: it says what it counts


AngularRun = RunResult  # tables: angular (layer, n, distance, tokens), layers (per-layer statistics of x_l)


def last_rows(mask: Any) -> Any:
    """Flat indices of each sequence's last real token (right padding never counts)."""
    import torch

    lengths = mask.sum(dim=1)  # (batch,)
    return torch.arange(mask.shape[0], device=mask.device) * mask.shape[1] + lengths - 1


@dataclasses.dataclass
class _Pass:
    """The running float64 sums of one process, and the token vectors kept for the effective rank."""

    accumulator: Any  # metrics.angular.AngularAccumulator
    sampled: list  # (batch index, per-layer token vectors)
    processed: int  # tokens of all ranks' batches seen
    lens: Any = None  # metrics.lens.LensAccumulator (causal LMs with a trained head), else None
    routing: Any = None  # metrics.router.RouterAccumulator (empty for models without experts)

    def measures(self) -> dict[str, Any]:
        """The accumulators this pass runs, by their name in the checkpoint: each has state() -> one flat tensor
        of sums (summed over processes, saved, restored) and load_state(tensor); the pass loops over them."""
        found = {"sums": self.accumulator, "lens": self.lens, "router": self.routing}
        return {name: m for name, m in found.items() if m is not None and (name != "router" or bool(m))}


def _check_finite(accumulator: Any, batch: int, dtype: str) -> None:
    """The running sums turn NaN or inf with the first non-finite block input: name that block and the batch."""
    import torch

    bad = (~torch.isfinite(accumulator.norm_sum)).nonzero()
    if len(bad):
        layer = int(bad[0])
        where = f"the input of block {layer}" if layer < len(accumulator.norm_sum) - 1 else "the last block's output"
        raise NumericsError(f"{where.capitalize()} is NaN or infinite in batch {batch} at {dtype}: "
                            f"{numerics_fix(dtype)}.")


def _restore(checkpoint: PassCheckpoint | None, done: _Pass) -> tuple[list, dict]:
    """(sampled, counters) from a saved checkpoint (the sums go straight into the accumulators), or a fresh start."""
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is None:
        return [], {"batches": 0, "processed": 0, "measured_before": 0}
    tensors, counters = saved
    for name, measure in done.measures().items():
        if name in tensors:
            measure.load_state(tensors[name])
    layers = len(done.accumulator.norm_sum)
    sampled = [(-1, [tensors[f"rank{k}"] for k in range(layers)])] if "rank0" in tensors else []
    return sampled, counters


def _save(checkpoint: PassCheckpoint | None, done: _Pass, counters: dict, force: bool = False) -> None:
    if checkpoint is None or not (force or checkpoint.due()):
        return  # gathering the sums and samples costs a copy of each: only when a save is due
    import torch

    sampled = done.sampled
    tensors = {name: measure.state() for name, measure in done.measures().items()}
    if sampled:
        tensors |= {f"rank{k}": torch.cat([part[1][k] for part in sampled]) for k in range(len(sampled[0][1]))}
    checkpoint.save(tensors, counters, force)


def _lens_update(done: _Pass, probe: Any, capture: Any, rows: Any, measured_before: int,
                 progress: Progress = silent, total: int = 0) -> None:
    """The logit lens on the first lens-tokens measured positions (in stream order, as in one process); its own
    bar, "logit lens", in positions: for a large vocabulary it can take longer than the pass."""
    import torch

    take = rows[: max(done.lens.limit - measured_before, 0)]
    if take.numel() == 0:
        return
    picked = [s.reshape(-1, s.shape[-1]).index_select(0, take.to(s.device)) for s in capture.states]  # K x (n, d)
    model = probe.model
    with tail_only(model, probe.stack) as replay:
        replay.like(capture)
        def head(x: Any) -> Any:  # (positions, d) -> (positions, V): the model's own final norm and head
            replay.value = x.unsqueeze(1)
            dummy = torch.zeros(x.shape[0], 1, dtype=torch.long, device=x.device)
            return model(input_ids=dummy).logits[:, 0]

        done.lens.update(head, picked, lambda n: progress(LENS_STAGE, n, total))
        replay.value = None


def _measure(config: AngularConfig, probe, world, progress: Progress, checkpoint: PassCheckpoint | None,
             lens: bool = False) -> _Pass:
    """One pass over the corpus; every rank walks the same deterministic stream and computes batch i when
    i % world size == rank. With a checkpoint (one process), the sums are saved as they grow and a resumed pass
    skips the batches already counted: the same sums, in the same order, as an uninterrupted pass."""
    import torch

    accumulator = AngularAccumulator(len(probe.stack) + 1, device=probe.device)
    done = _Pass(accumulator, [], 0, LensAccumulator(len(probe.stack) + 1, lens_limit(config, probe)) if lens else None)
    done.routing = RouterAccumulator(probe.model, probe.stack)
    done.sampled, counters = _restore(checkpoint, done)
    sampled = done.sampled
    processed, measured_before = counters["processed"], counters["measured_before"]  # tokens seen / positions measured
    done.processed = processed  # a pass saved after its last batch resumes with nothing left to run, not with 0 tokens
    # with the logit lens the model carries its LM head; the pass runs only the base model (no full-vocab logits)
    forward = probe.model.base_model  # a head's full-vocabulary logits are never computed for the pass
    total = config.data.tokens
    measured = total if config.positions == "all" else -(-total // probe.seq_len)  # at most; exact for "all"
    lens_total = min(done.lens.limit, measured) if done.lens is not None else 0
    progress("tokens", processed, total)
    stream = batches(probe.corpus.texts(), probe.tokenizer, probe.seq_len, config.data.batch_size, total)
    with BlockCapture(probe.stack) as capture, done.routing, torch.inference_mode():
        for index, batch in enumerate(stream):
            if index < counters["batches"]:
                continue  # counted before an interruption
            tokens = int(batch.attention_mask.sum())
            positions = batch.input_ids.shape[0] if config.positions == "last" else tokens
            if index % world.size == world.rank:
                ids, mask = batch.input_ids.to(probe.device), batch.attention_mask.to(probe.device)
                forward(input_ids=ids, attention_mask=mask)
                rows = last_rows(mask) if config.positions == "last" else mask.flatten().nonzero().squeeze(1)
                accumulator.update(capture.states, rows)
                if done.routing:
                    done.routing.update(rows)
                _check_finite(accumulator, index, probe.loaded.dtype)
                if done.lens is not None:
                    _lens_update(done, probe, capture, rows, measured_before, progress if world.main else silent,
                                 lens_total)
                if measured_before < RANK_SAMPLE:  # the first RANK_SAMPLE measured positions, as in one process
                    take = rows[: RANK_SAMPLE - measured_before]
                    sampled.append((index, [s.reshape(-1, s.shape[-1]).index_select(0, take.to(s.device)).float().cpu()
                                            for s in capture.states]))
            measured_before += positions
            processed += tokens
            done.processed = processed
            counters = {"batches": index + 1, "processed": processed, "measured_before": measured_before}
            _save(checkpoint, done, counters)
            if world.main:
                progress("tokens", processed, total)
    _save(checkpoint, done, counters, force=True)  # the whole pass: a failed write of the outputs loses nothing
    return done


@takes(AngularConfig, "layerprobe.angular")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_angular(config: AngularConfig, progress: Progress = silent) -> AngularRun:
    """Measure d(x_l, x_{l+n}) for every l, n over the probe corpus and write the run folder."""
    if config.positions not in POSITIONS:
        raise ConfigError(f"Unknown --positions '{config.positions}': use all or last.")
    started, clock = start_time(), time.perf_counter()
    world = current_world()
    world.refuse_device_map(config.model.device_map)
    out = COMMAND.out(config, config.model.model)
    if config.resume:
        if world.size > 1:
            raise ConfigError("angular --resume runs in one process: drop torchrun, or run the pass again.")
        check_resume(Path(out), COMMAND, config)
    # every cheap problem named at once, before any load and before --overwrite clears the run it replaces
    corpus, head = preflight(config.model, config.data, more=(lambda: lens_head(config),))
    # claimed before the pass: an unwritable --out fails in seconds, and only rank 0 writes
    folder = prepare_run_dir(out, config.overwrite, config.resume, COMMAND) if world.main else None
    probe = open_probe(dataclasses.replace(config.model, device=world.device(config.model.device)), config.data,
                       head=head, checked=(corpus,))
    lens = head == "causal-lm"
    if lens and probe.loaded.new_head:
        probe.warnings.append(f"No logit lens: the checkpoint has no trained LM head ({', '.join(probe.loaded.new_head)} "
                              "missing); logit_lens_kl is left empty.")
        lens = False
    checkpoint = None
    if world.size == 1:
        identity = probe.identity(config, lens_tokens=lens_limit(config, probe) if lens else 0) | {"sums": 2}
        checkpoint = PassCheckpoint(folder, identity, every=config.save_every)
        if not config.resume:
            checkpoint.clear()  # a --resume without a saved pass (killed before its first save) starts afresh
    return measure_into(folder, config, probe, progress, checkpoint, lens, world, started, clock)


def measure_into(folder: Path | None, config: AngularConfig, probe: Any, progress: Progress = silent,
                 checkpoint: PassCheckpoint | None = None, lens: bool = False, world: Any = None,
                 started: str | None = None, clock: float | None = None) -> AngularRun:
    """The pass over the probe corpus with a loaded model, and the angular run written into `folder` (claimed by
    the caller): run_angular's work, and what `prune --curve` measures when no angular run is at hand."""
    import torch

    world = world or current_world()
    started, clock = started or start_time(), clock if clock is not None else time.perf_counter()
    per_batch = probe.seq_len * config.data.batch_size
    world.refuse_idle(-(-config.data.tokens // per_batch), f"batch(es) of {config.data.batch_size} x {probe.seq_len} "
                      "tokens", f"ask for at least {world.size * per_batch} --tokens or run fewer processes")
    reset_peak_memory(probe.device)
    done = _measure(config, probe, world, progress, checkpoint, lens)
    for measure in done.measures().values():  # one all-reduce each: the sums a single process would have
        measure.load_state(world.sum(measure.state()))
    parts = sorted((p for rank_parts in world.gather(done.sampled) for p in rank_parts), key=lambda p: p[0])
    warnings = list(probe.warnings)
    if done.processed == 0:
        raise empty_corpus_error(probe.corpus.spec)
    if done.processed < config.data.tokens:
        warnings.append(f"The corpus ran out: used {done.processed} tokens of the {config.data.tokens} asked for.")
    stats = done.accumulator.result()
    ranks = [effective_rank(torch.cat([p[1][layer] for p in parts])) if parts else float("nan")
             for layer in range(len(probe.stack) + 1)]
    seconds = time.perf_counter() - clock
    if not world.main:
        return AngularRun(None, warnings=warnings)  # rank 0 writes the run folder

    facts = probe.facts() | {
        "dataset": probe.corpus.description,
        "tokens": done.processed,
        "tokens_requested": config.data.tokens,
        "measured_positions": stats.tokens,
        "positions": config.positions,
        "seq_len": probe.seq_len,
        "batch_size": config.data.batch_size,
        "rank_tokens": sum(p[1][0].shape[0] for p in parts),
        "processes": world.size,
        "peak_gpu_memory_gib": peak_memory_gib(probe.device),
        "logit_lens_tokens": done.lens.tokens if done.lens is not None else 0,
    }
    run = write_angular_run(folder, stats, facts, config, started, seconds, warnings, ranks,
                            done.lens.result().numpy() if done.lens is not None else None,
                            facts["layer_types"], done.routing.result())
    if checkpoint is not None:
        checkpoint.clear()  # the outputs are written: nothing left to resume
    return run


def lens_limit(config: AngularConfig, probe: Any) -> int:
    """The lens positions: --lens-tokens, or by default fewer for a larger vocabulary and a shorter run
    (metrics/lens.py default_lens_tokens). The settings keep what was given (None); the count used is in
    summary.json's logit_lens_tokens."""
    if config.lens_tokens is not None:
        return config.lens_tokens
    vocab = probe.model.get_output_embeddings().weight.shape[0]
    return default_lens_tokens(vocab, config.data.tokens)


def lens_head(config: AngularConfig) -> str:
    """'causal-lm' when the logit lens is asked for (--lens-tokens > 0, or left to its default) and the model is a
    causal LM, else 'base'. --lens-tokens N > 0 given for a model without an LM head would do nothing: refused from
    its config, before the weights load (the one rule for options that do not apply, settings.check_applies)."""
    if config.lens_tokens is not None and config.lens_tokens <= 0:
        return "base"
    from layerprobe.internals import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        model_type = peek_model_type(config.model.model, config.model.revision, config.model.trust_remote_code,
                                     config.model.gguf_file)
    except LayerprobeError:
        return "base"  # an unreadable MODEL: named once, by preflight's own check of it
    causal = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in ENCODER_MODEL_TYPES
    if not causal and config.lens_tokens is not None:
        raise ConfigError(f"--lens-tokens {config.lens_tokens} does nothing with MODEL '{config.model.model}': it is "
                          f"{'an' if str(model_type)[:1] in 'aeiou' else 'a'} {model_type or 'unknown'} model, not a "
                          "causal language model, so it has no LM head for the logit lens; drop --lens-tokens (or "
                          "pass 0).")
    return "causal-lm" if causal else "base"


def angular_tables(stats: Any, ranks: list[float] | None = None, lens: Any = None, kinds: list[str] | None = None,
                   routing: tuple[list[float], list[float]] | None = None) -> tuple[Any, Any]:
    """(angular: one row per (l, n), layers: one row per x_l) from the accumulated statistics. Row l describes
    block l's input and, for kinds and routing, block l itself (the last row, the output, has none)."""
    import numpy as np
    import pandas as pd

    distance = stats.distance.numpy()
    num_layers = distance.shape[0] - 1
    angular = pd.DataFrame(
        [
            {"layer": layer, "n": n, "distance": distance[layer, layer + n], "tokens": stats.tokens}
            for n in range(1, num_layers + 1)
            for layer in range(num_layers - n + 1)
        ]
    )
    values = {  # one entry per layers.csv column (runs/columns.py: order, meaning, unit)
        "layer": list(range(num_layers + 1)),
        "layer_type": (list(kinds) if kinds else [""] * num_layers) + [""],
        "distance_next": [distance[i, i + 1] for i in range(num_layers)] + [np.nan],
        "norm": stats.norm.numpy(),
        "variance": stats.variance.numpy(),
        "cos_input": stats.cos_input.numpy(),
        "tokens": stats.tokens,
        "effective_rank": ranks if ranks is not None else [np.nan] * (num_layers + 1),
        "block_influence": ([1.0 - c for c in stats.cos_next.tolist()] if stats.cos_next is not None
                            else [np.nan] * num_layers) + [np.nan],
        "logit_lens_kl": lens if lens is not None else [np.nan] * (num_layers + 1),
        "router_entropy": (list(routing[0]) if routing else [np.nan] * num_layers) + [np.nan],
        "expert_load": (list(routing[1]) if routing else [np.nan] * num_layers) + [np.nan],
    }
    layers = pd.DataFrame({name: values[name] for name in column_names(LAYER_COLUMNS)})
    return angular, layers


def write_angular_run(folder: Path, stats: Any, facts: dict, config: AngularConfig, started: str,
                      seconds: float, warnings: list[str], ranks: list[float] | None = None,
                      lens: Any = None, kinds: list[str] | None = None, routing: Any = None) -> AngularRun:
    """angular.csv, layers.csv, heatmap, summary.json, manifest.json."""
    angular, layers = angular_tables(stats, ranks, lens, kinds, routing)
    best = angular.loc[angular.groupby("n")["distance"].idxmin()]
    best_per_n = [
        {"n": int(r.n), "layer": int(r.layer), "layers": ranges_label(list(range(int(r.layer), int(r.layer + r.n)))), "distance": float(r.distance)}
        for r in best.itertuples()
    ]
    summary = {**facts, "seconds": round(seconds, 3), "prune_first": best_per_n,
               "warnings": warnings}
    title = f"{model_label(facts['model'])}: angular distance over {facts['tokens']:,} tokens ({facts['positions']} positions)"
    figure = angular_heatmap(stats.distance.numpy(), title, kinds=kinds)
    return write_run(folder, COMMAND, tables={"angular": angular, "layers": layers}, figures={"heatmap": figure},
                     summary=summary, config=config, started=started, seconds=seconds, facts=facts,
                     formats=config.formats)
