"""run_prune(config): remove one layer (or a block) at a time and measure dP = P_pruned - P_original."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from layerprobe.commands.prune import PRUNE_COMMAND
from layerprobe.commands.prune.merge import merge_shards
from layerprobe.commands.prune.outputs import COLUMNS, PruneRun, find_angular, write_prune_outputs
from layerprobe.commands.prune.sweeps import SweepJob, open_sweep
from layerprobe.commands.probe import refuse_ranges_early
from layerprobe.config import PruneConfig
from layerprobe.distributed import World, current_world
from layerprobe.errors import ConfigError
from layerprobe.evaluation.variants import PARTS, parse_layers, parse_shard, shard_of, shard_suffix, sweep
from layerprobe.progress import Progress, silent
from layerprobe.runs.folder import abandons_on_error, check_owned, prepare_run_dir
from layerprobe.runs.manifest import start_time
from layerprobe.runs.resume import Ledger, check_resume
from layerprobe.settings import takes


def _shard_for(config: PruneConfig, world: World) -> tuple[PruneConfig, tuple[int, int] | None]:
    """--shard K/N, or under torchrun rank r's shard r+1 of N on its own device."""
    shard = parse_shard(config.shard)
    if world.size == 1:
        return config, shard
    if shard:
        raise ConfigError("--shard under torchrun: torchrun already splits the sweep over its processes; drop "
                          "--shard, or run N separate processes with --shard K/N.")
    shard = (world.rank + 1, world.size)
    return dataclasses.replace(config, shard=f"{shard[0]}/{shard[1]}", model=dataclasses.replace(
        config.model, device=world.device(config.model.device))), shard


@takes(PruneConfig, "layerprobe.prune")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_prune(config: PruneConfig, progress: Progress = silent) -> PruneRun:
    """The sweep: baseline once, then each variant; finished work is on disk after every step."""
    import torch

    started, clock = start_time(), time.perf_counter()
    world = current_world()
    world.refuse_device_map(config.model.device_map)
    if config.part not in PARTS:
        raise ConfigError(f"Unknown --part '{config.part}': use {', '.join(PARTS)}.")
    config, shard = _shard_for(config, world)
    progress = progress if world.main else silent
    base = PRUNE_COMMAND.out(dataclasses.replace(config, shard=None), config.model.model)  # the whole sweep's
    out = base + shard_suffix(config.shard) if world.size > 1 or not config.out else config.out
    if config.resume:  # before the folder or the model is touched
        check_resume(Path(out), PRUNE_COMMAND, config, finished_resumes=True)
    elif config.overwrite:  # refused before the model loads, not after
        check_owned(Path(out), PRUNE_COMMAND, "--overwrite")
    refuse_ranges_early(config.model, layers=config.layers, block=config.block)  # before the load
    if config.angular:  # a damaged or unfinished --angular run: refused before the sweep writes anything
        find_angular(Path(out), config.angular)
    task, probe = open_sweep(config)
    warnings = probe.warnings + task.check(probe)
    variants = sweep(len(probe.stack), config.block, parse_layers(config.layers, len(probe.stack)))
    sweep_size = len(variants)
    world.refuse_idle(sweep_size, "variants")
    if shard:
        variants = shard_of(variants, *shard)

    folder = prepare_run_dir(out, config.overwrite, config.resume, PRUNE_COMMAND)
    facts = probe.facts()
    # every setting that changes a number (settings.identity) and what it resolved to: a --resume with any other
    # value is refused, never mixed in
    identity = probe.identity(config)
    job = SweepJob(config, probe, variants, Ledger(folder, identity, config.resume, COLUMNS, table="prune"), progress,
                   warnings)
    with torch.inference_mode():
        higher = task.run(job)
    facts |= {"task": config.task, "part": config.part, "sublayer": config.sublayer}
    if shard:  # what `layerprobe merge` checks: every slice present once, all of the same sweep
        facts["shard"] = {"index": shard[0], "count": shard[1], "sweep_variants": sweep_size,
                          "variants": [v.label for v in variants]}
    facts |= task.facts(job)
    # seconds: this process's, plus the working time of the interrupted parts a --resume continued
    seconds = time.perf_counter() - clock + float(job.ledger.state.get("seconds_before", 0.0))
    run = write_prune_outputs(folder, job.ledger.rows, config, facts, higher, started, seconds, job.warnings,
                              records=job.ledger.records)
    if world.size == 1:
        return run
    folders = world.gather(str(run.folder))  # also waits for every rank's shard
    if not world.main:
        return PruneRun(None, warnings=job.warnings)
    return merge_shards(folders, base, overwrite=config.overwrite, formats=config.formats)
