"""run_angular(config): stream tokens through the model, hook block inputs, write the run folder."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.config import AngularConfig
from layerprobe.errors import ConfigError
from layerprobe.progress import Progress, silent

log = logging.getLogger(__name__)

RANK_SAMPLE = 2048  # token vectors per layer for the effective rank in layers.csv

POSITIONS = ("all", "last")


@dataclass
class AngularRun:
    """What `layerprobe angular` produced."""

    folder: Path
    angular: Any  # DataFrame: layer, n, distance, tokens
    layers: Any  # DataFrame: per-layer statistics of x_l
    summary: dict
    warnings: list[str] = field(default_factory=list)


def prepare_probe(model_opts, data_opts, head: str = "base", need_corpus: bool = True):
    """Shared set-up of probing commands: the cheap checks first (a local model folder, then the corpus), then
    model, blocks, seq-len."""
    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import check_sizes, max_sequence_length
    from layerprobe.models.layers import find_blocks
    from layerprobe.models.load import load_model, locate

    check_sizes(data_opts.tokens, data_opts.seq_len, data_opts.batch_size)
    locate(model_opts.model)  # a missing or broken folder is named before any dataset problem
    corpus = open_corpus(data_opts.dataset, data_opts.text_field) if need_corpus else None
    loaded = load_model(
        model_opts.model,
        head=head,
        dtype=model_opts.dtype,
        device=model_opts.device,
        revision=model_opts.revision,
        trust_remote_code=model_opts.trust_remote_code,
        device_map=model_opts.device_map,
        offload=model_opts.offload,
    )
    stack = find_blocks(loaded.model, model_opts.layers_path)
    warnings = []
    seq_len = data_opts.seq_len
    limit = max_sequence_length(loaded.model, loaded.tokenizer)
    if need_corpus and limit is not None and seq_len > limit:
        warnings.append(f"--seq-len {seq_len} exceeds the model's maximum; using {limit}.")
        seq_len = limit
    return corpus, loaded, stack, seq_len, warnings


def last_rows(mask: Any) -> Any:
    """Flat indices of each sequence's last real token (right padding never counts)."""
    import torch

    lengths = mask.sum(dim=1)  # (batch,)
    return torch.arange(mask.shape[0], device=mask.device) * mask.shape[1] + lengths - 1


def model_facts(loaded: Any, stack: Any) -> dict:
    from layerprobe.runs.manifest import weights_fingerprint

    return {
        "model": loaded.spec,
        "model_source": loaded.source,
        "model_path": str(loaded.path) if loaded.path else None,
        "revision": loaded.revision,
        "weights": weights_fingerprint(loaded.path) if loaded.path else None,
        "architecture": type(loaded.model).__name__,
        "layers_path": stack.path,
        "num_layers": len(stack),
        "dtype": loaded.dtype,
        "device": loaded.device,
    }


def run_angular(config: AngularConfig, progress: Progress = silent) -> AngularRun:
    """Measure d(x_l, x_{l+n}) for every l, n over the probe corpus and write the run folder."""
    import torch

    from layerprobe.data.packing import batches, empty_corpus_error
    from layerprobe.hooks import BlockCapture
    from layerprobe.metrics.angular import AngularAccumulator
    from layerprobe.distributed import current_world
    from layerprobe.metrics.stats import effective_rank
    from layerprobe.runs.folder import prepare_run_dir, slug
    from layerprobe.runs.manifest import start_time

    if config.positions not in POSITIONS:
        raise ConfigError(f"Unknown --positions '{config.positions}': use all or last.")
    started, clock = start_time(), time.perf_counter()
    world = current_world()
    world.refuse_device_map(config.model.device_map)
    model_opts = dataclasses.replace(config.model, device=world.device(config.model.device))
    corpus, loaded, stack, seq_len, warnings = prepare_probe(model_opts, config.data)
    model, device = loaded.model, loaded.device
    per_batch = seq_len * config.data.batch_size
    world.refuse_idle(-(-config.data.tokens // per_batch), f"batch(es) of {config.data.batch_size} x {seq_len} tokens",
                      f"ask for at least {world.size * per_batch} --tokens or run fewer processes")
    from layerprobe.models.device_map import peak_memory_gib, reset_peak_memory

    reset_peak_memory(device)
    accumulator = AngularAccumulator(len(stack) + 1, device=device)
    sampled: list[tuple[int, list]] = []  # (batch index, per-layer token vectors) for the effective rank
    processed = measured_before = 0  # tokens of all ranks' batches seen so far / measured positions before a batch
    total = config.data.tokens
    progress("tokens", 0, total)
    with BlockCapture(stack) as capture, torch.inference_mode():
        # Every rank walks the same deterministic stream; batch i is computed by rank i % world size.
        for index, batch in enumerate(batches(corpus.texts(), loaded.tokenizer, seq_len, config.data.batch_size, total)):
            tokens = int(batch.attention_mask.sum())
            positions = batch.input_ids.shape[0] if config.positions == "last" else tokens
            mine = index % world.size == world.rank
            if mine:
                ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
                model(input_ids=ids, attention_mask=mask)
                rows = last_rows(mask) if config.positions == "last" else mask.flatten().nonzero().squeeze(1)
                accumulator.update(capture.states, rows)
                if measured_before < RANK_SAMPLE:  # the first RANK_SAMPLE measured positions, as in one process
                    take = rows[: RANK_SAMPLE - measured_before]
                    sampled.append((index, [s.reshape(-1, s.shape[-1]).index_select(0, take.to(s.device)).float().cpu()
                                            for s in capture.states]))
            measured_before += positions
            processed += tokens
            if world.main:
                progress("tokens", processed, total)
    accumulator.load_state(world.sum(accumulator.state()))  # one all-reduce: the single-process sums
    parts = sorted((p for rank_parts in world.gather(sampled) for p in rank_parts), key=lambda p: p[0])
    if processed == 0:
        raise empty_corpus_error(corpus.spec)
    if processed < total:
        warnings.append(f"The corpus ran out: used {processed} tokens of the {total} asked for.")
    stats = accumulator.result()
    ranks = [effective_rank(torch.cat([p[1][layer] for p in parts])) if parts else float("nan")
             for layer in range(len(stack) + 1)]
    seconds = time.perf_counter() - clock
    if not world.main:
        return AngularRun(None, None, None, {}, warnings)  # rank 0 writes the run folder

    out = config.out or str(Path("reports") / slug(loaded.spec) / "angular")
    folder = prepare_run_dir(out, overwrite=config.overwrite)
    facts = model_facts(loaded, stack) | {
        "dataset": corpus.description,
        "tokens": processed,
        "tokens_requested": total,
        "measured_positions": stats.tokens,
        "positions": config.positions,
        "seq_len": seq_len,
        "batch_size": config.data.batch_size,
        "rank_tokens": sum(p[1][0].shape[0] for p in parts),
        "processes": world.size,
        "peak_gpu_memory_gib": peak_memory_gib(device),
    }
    run = write_angular_run(folder, stats, facts, config, started, seconds, warnings, ranks)
    return run


def write_angular_run(folder: Path, stats: Any, facts: dict, config: AngularConfig, started: str,
                      seconds: float, warnings: list[str], ranks: list[float] | None = None) -> AngularRun:
    """angular.csv, layers.csv, heatmap, summary.json, manifest.json."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from layerprobe.plots.heatmap import angular_heatmap
    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.manifest import build_manifest

    distance = stats.distance.numpy()
    num_layers = distance.shape[0] - 1
    angular = pd.DataFrame(
        [
            {"layer": layer, "n": n, "distance": distance[layer, layer + n], "tokens": stats.tokens}
            for n in range(1, num_layers + 1)
            for layer in range(num_layers - n + 1)
        ]
    )
    next_distance = [distance[i, i + 1] for i in range(num_layers)] + [np.nan]
    layers = pd.DataFrame(
        {
            "layer": range(num_layers + 1),
            "norm": stats.norm.numpy(),
            "variance": stats.variance.numpy(),
            "distance_next": next_distance,
            "cos_input": stats.cos_input.numpy(),
            "tokens": stats.tokens,
            "effective_rank": ranks if ranks is not None else [np.nan] * (num_layers + 1),
        }
    )
    best = angular.loc[angular.groupby("n")["distance"].idxmin()]
    best_per_n = [
        {"n": int(r.n), "layer": int(r.layer), "layers": f"{int(r.layer)}-{int(r.layer + r.n - 1)}", "distance": float(r.distance)}
        for r in best.itertuples()
    ]
    summary = {
        "command": "angular",
        **facts,
        "seconds": round(seconds, 3),
        "prune_first": best_per_n,
        "warnings": warnings,
    }
    write_csv(folder / "angular.csv", angular)
    write_csv(folder / "layers.csv", layers)
    title = f"{facts['model']}: angular distance over {facts['tokens']:,} tokens ({facts['positions']} positions)"
    figure = angular_heatmap(distance, title)
    save_figure(folder / "heatmap", figure, config.formats)
    plt.close(figure)
    write_json(folder / "summary.json", summary)
    write_json(folder / "manifest.json", build_manifest("angular", config.to_dict(), started, seconds, **facts))
    return AngularRun(folder, angular, layers, summary, warnings)
