"""run_gradnorm(config): per-layer gradient norms at initialization (and during short training) for each
normalization placement, or for a checkpoint as it is or re-initialized."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerprobe.commands.gradnorm import COMMAND
from layerprobe.commands.gradnorm.measure import measure_gradients
from layerprobe.commands.gradnorm.outputs import GradnormRun, aggregate, write_gradnorm_outputs
from layerprobe.config import GradnormConfig
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches, check_sizes, empty_corpus_error
from layerprobe.distributed import World, current_world
from layerprobe.errors import ConfigError, ModelLoadError, NumericsError, first_line
from layerprobe.models.device_map import peak_memory_gib, reset_peak_memory
from layerprobe.models.inhouse import build, make_config, shares_init
from layerprobe.models.layers import ENCODER_MODEL_TYPES, find_blocks
from layerprobe.models.load import embedded_model_dir, load_model, locate, peek_model_type, resolve_device, resolve_dtype
from layerprobe.models.placement import check_placements
from layerprobe.models.training import lm_inputs, train
from layerprobe.progress import Progress, silent
from layerprobe.runs.folder import abandons_on_error, check_owned, prepare_run_dir
from layerprobe.runs.manifest import start_time
from layerprobe.runs.resume import JobStore, check_resume
from layerprobe.settings import identity as settings_identity, takes


def record_steps(spec: str | None, steps: int) -> list[int]:
    """Steps at which to measure: '0,100,500', or by default init, quarters and the end."""
    if steps < 0:
        raise ConfigError(f"--steps must be 0 or more, got {steps}.")
    if spec is None:
        return sorted({0, *(round(steps * q / 4) for q in range(1, 5))}) if steps else [0]
    try:
        chosen = sorted({int(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"--record-steps '{spec}' is not a list of integers, e.g. 0,50,100.") from None
    if not chosen or chosen[0] < 0 or chosen[-1] > steps:
        raise ConfigError(f"--record-steps must lie within 0..{steps} (--steps), got '{spec}'.")
    return chosen


def _cycle(batch_source, warnings: list[str]):
    """Training batches, starting over (with one warning) when the corpus runs out."""
    passes = 0
    while True:
        count = 0
        for batch in batch_source():
            count += 1
            yield batch.input_ids, batch.attention_mask
        if count == 0:
            return
        passes += 1
        if passes == 1:
            warnings.append(f"The corpus ran out after {count} training batches: --steps reuses it from the start.")


def _validate(config: GradnormConfig) -> list[int]:
    """Every check that needs no model or data; returns the steps to record at."""
    if config.seeds <= 0 or config.batches <= 0:
        raise ConfigError("--seeds and --batches must be positive integers.")
    check_sizes(None, config.data.seq_len, config.data.batch_size)
    if config.reinit and config.model is None:
        raise ConfigError("--reinit re-initializes a checkpoint from its config: pass MODEL too.")
    if config.reinit and config.model.device_map:
        raise ConfigError("--reinit builds the fresh model on one device: drop --device-map, or measure the "
                          "checkpoint as it is.")
    check_placements(config.norms)
    steps = record_steps(config.record_steps, config.train.steps)
    train = config.train
    if config.train.steps and not (0 < train.lr < float("inf") and train.warmup >= 0 and 0 <= train.clip < float("inf")):
        raise ConfigError(f"--lr must be a positive number and --warmup, --clip 0 or more (got --lr {train.lr}, "
                          f"--warmup {train.warmup}, --clip {train.clip}).")
    if config.model is not None:
        locate(config.model.model, config.model.gguf_file)  # a missing or broken model before any dataset problem
    return steps


@dataclass
class Subjects:
    """What the jobs measure: the in-house family (cases = placements) or one loaded checkpoint."""

    tokenizer: Any
    device: str
    dtype: str
    name: str  # the arch or the model spec
    encoder: bool  # masked-LM loss (BERT-like) instead of causal
    cases: list[tuple[str, Any]]  # (placement or 'as-is'/'reinit', LoadedModel or None)


def _inhouse(config: GradnormConfig, world: World) -> Subjects:
    import transformers

    tokenizer_spec = config.tokenizer or str(embedded_model_dir())
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_spec)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Could not load tokenizer '{tokenizer_spec}': {first_line(exc)}.") from None
    device = resolve_device(world.device(config.device))
    make_config(config.arch, config.norms[0], mix_alpha=config.alpha, norm_type=config.norm_type)  # validate early
    return Subjects(tokenizer, device, resolve_dtype(config.dtype, device), config.arch, False,
                    [(norm, None) for norm in config.norms])


def _checkpoint(config: GradnormConfig, world: World) -> Subjects:
    opts = config.model
    # Encoders get a masked-LM loss, decoders a causal one: decided from the config, loaded once.
    encoder = peek_model_type(opts.model, opts.revision, opts.trust_remote_code, opts.gguf_file) in ENCODER_MODEL_TYPES
    loaded = load_model(opts.model, head="masked-lm" if encoder else "causal-lm", dtype=config.dtype,
                        device=world.device(config.device), revision=opts.revision,
                        trust_remote_code=opts.trust_remote_code, device_map=opts.device_map, offload=opts.offload,
                        gguf_file=opts.gguf_file, cache=opts.cache, allow_missing=config.reinit)
    if loaded.new_head and not config.reinit:
        raise ModelLoadError(
            f"'{loaded.spec}' has no trained {'masked' if encoder else 'causal'}-LM head "
            f"({', '.join(loaded.new_head[:3])} missing), so its loss would go through random weights: pass --reinit "
            "to measure at initialization, or a checkpoint saved with its LM head."
        )
    offloaded = sum(p.numel() for p in loaded.model.parameters() if p.device.type == "meta")
    if offloaded:
        raise ConfigError(f"gradnorm needs every weight resident on a device, and {offloaded:,} parameters of "
                          f"'{loaded.spec}' are offloaded (--offload {opts.offload}): use more GPUs or no offload.")
    return Subjects(loaded.tokenizer, loaded.device, loaded.dtype, loaded.spec, encoder,
                    [("reinit" if config.reinit else "as-is", loaded)])


class _Models:
    """Builds (or takes) each job's model. Placements of one seed with the plain LLaMA init take over the previous
    in-house model's weights instead of drawing them again (shares_init); a model that trains is drawn anew."""

    def __init__(self, config: GradnormConfig, subjects: Subjects) -> None:
        self.config, self.subjects = config, subjects
        self.previous = None  # (seed, model) of the last in-house model, while its untrained weights may be reused

    def get(self, norm: str, loaded: Any, seed: int) -> Any:
        import torch

        config, subjects = self.config, self.subjects
        torch.manual_seed(seed)
        if loaded is None:
            cfg = make_config(config.arch, norm, mix_alpha=config.alpha, norm_type=config.norm_type,
                              vocab_size=len(subjects.tokenizer), max_position_embeddings=max(1024, config.data.seq_len))
            previous, self.previous = self.previous, None  # freed before the next model is built, unless reused
            like = previous[1] if previous and previous[0] == seed and shares_init(previous[1].config, cfg) else None
            previous = None
            model = build(cfg, subjects.device, getattr(torch, subjects.dtype), like=like)
            if not config.train.steps:
                self.previous = (seed, model)
        elif config.reinit:
            model = type(loaded.model)._from_config(loaded.model.config).to(subjects.device)
        else:
            model = loaded.model  # trained weights: one job, seeds would repeat the same numbers
        return model.eval()  # no dropout: the gradient of the deterministic network


@dataclass
class _Jobs:
    """This process's (placement, seed) jobs and what they produced, as (job index, row) pairs."""

    config: GradnormConfig
    subjects: Subjects
    batch_list: list
    steps: list[int]
    store: JobStore
    progress: Progress
    stage: str
    units: int  # progress units per job
    total: int
    done: int = 0
    resumed: int = 0

    def advance(self, count: int = 1) -> None:
        self.done += count
        self.progress(self.stage, self.done, self.total)


def monitor_every(config: GradnormConfig) -> int:
    """Steps between the training-time measurements of training.csv: --monitor-every, else about 20 of them."""
    return config.monitor_every or max(1, config.train.steps // 20)


@dataclass
class _Found:
    """What the jobs of this process produced, as (job index, row) pairs: gradnorm rows, losses, training rows."""

    rows: list
    losses: list
    training: list

    NAMES = ("rows", "losses", "training")

    def since(self, marks: tuple[int, ...]) -> dict:
        return {name: [row for _, row in getattr(self, name)[mark:]] for name, mark in zip(self.NAMES, marks)}

    def marks(self) -> tuple[int, ...]:
        return tuple(len(getattr(self, name)) for name in self.NAMES)

    def add(self, job: int, saved: dict) -> None:
        for name in self.NAMES:
            getattr(self, name).extend((job, row) for row in saved.get(name, []))


def _run_job(jobs: _Jobs, job: int, model: Any, norm: str, seed: int, stream, found: _Found,
             warnings: list[str]) -> None:
    """Measure one model at the recorded steps (training between them with --steps, watched by a LayerMonitor:
    the same measurement layerprobe.integrations makes inside a user's training)."""
    import torch

    from layerprobe.integrations.monitor import LayerMonitor

    config, subjects = jobs.config, jobs.subjects
    stack = find_blocks(model, config.model.layers_path if config.model else None,
                        config.model.stack if config.model else None)

    def record(step: int) -> None:
        passes = None if config.train.steps else jobs.advance
        try:
            rows = list(measure_gradients(model, stack, jobs.batch_list, subjects.encoder, subjects.tokenizer, seed,
                                          on_batch=passes))
        except NumericsError as exc:
            if not step:
                raise
            # finite at step 0: the training steps made it so, not the checkpoint
            raise NumericsError(f"{exc.what}, after {step} training step(s) of {norm}: the training diverged at --lr "
                                f"{config.train.lr:g}: lower --lr (or keep --clip above 0).") from None
        found.rows += [(job, {"norm": norm, "seed": seed, "step": step, **row}) for row in rows]

    if 0 in jobs.steps:
        record(0)
    if not config.train.steps:
        return
    jobs.advance()
    monitor = LayerMonitor(model, probe=jobs.batch_list, stack=stack, shared=False, every=monitor_every(config))
    monitor.record(0)
    generator = torch.Generator().manual_seed(seed)
    training = (lm_inputs(ids, mask, subjects.encoder, subjects.tokenizer, generator)
                for ids, mask in _cycle(stream, warnings))

    def after(step: int, loss: float) -> None:
        found.losses.append((job, {"norm": norm, "seed": seed, "step": step, "loss": loss}))
        if monitor.due(step) or step == config.train.steps:
            monitor.record(step, monitor.gradients())  # this step's own gradients, as the optimizer took them
        if step in jobs.steps:
            record(step)
        jobs.advance()

    with torch.enable_grad():
        train(model, training, config.train, after)
    found.training += [(job, {"placement": norm, "seed": seed, **row}) for row in monitor.rows]


def _run_jobs(jobs: _Jobs, mine: list, stream, warnings: list[str]) -> _Found:
    found = _Found([], [], [])
    models = _Models(jobs.config, jobs.subjects)
    jobs.progress(jobs.stage, 0, jobs.total)
    for job, norm, loaded, seed in mine:
        name = f"{norm}-seed{seed}"
        saved = jobs.store.load(name)
        if saved is not None:  # finished before an interruption
            found.add(job, saved)
            jobs.resumed += 1
            jobs.advance(jobs.units)
            continue
        marks = found.marks()
        model = models.get(norm, loaded, seed)
        _run_job(jobs, job, model, norm, seed, stream, found, warnings)
        jobs.store.save(name, found.since(marks))
        model = None  # free this model before the next one is built, unless _Models keeps it for reuse
    return found


def _out(config: GradnormConfig) -> str:
    return COMMAND.out(config, config.model.model if config.model else config.arch)


def _open_store(config: GradnormConfig, world: World, subjects: Subjects) -> JobStore:
    """The run folder exists from here on: each finished job is saved in <out>/jobs/, so --resume after a crash or
    Ctrl-C redoes only the unfinished ones. Rank 0 sets it up; every rank saves its own jobs."""
    out = _out(config)
    loaded = subjects.cases[0][1]
    # gradnorm has no Probe and its own --dtype/--device: its three resolved keys are named here (the same three
    # for the in-house family and a checkpoint, as the jobs saved by earlier versions hold them)
    identity = settings_identity(config) | {
        "resolved.dtype": subjects.dtype, "resolved.device_kind": str(subjects.device).split(":")[0],
        "resolved.weights": loaded.fingerprint() if loaded is not None else None}
    store = None
    folder = None
    if world.main:
        folder = prepare_run_dir(out, config.overwrite, config.resume, COMMAND)
        store = JobStore(folder, identity, config.resume)
    folder = Path(world.gather(str(folder) if world.main else None)[0])
    return store or JobStore(folder, identity, config.resume, owner=False)


@takes(GradnormConfig, "layerprobe.gradnorm")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_gradnorm(config: GradnormConfig, progress: Progress = silent) -> GradnormRun:
    """Build (or load) each model, backpropagate real-token batches at init (and after training steps),
    record per-layer gradient norms and output variance."""
    started, clock = start_time(), time.perf_counter()
    world = current_world()
    progress = progress if world.main else silent
    world.refuse_device_map(config.model.device_map if config.model else None)
    steps = _validate(config)
    if config.resume and world.main:  # before the folder or the model is touched
        check_resume(Path(_out(config)), COMMAND, config)
    elif config.overwrite and world.main:
        check_owned(Path(_out(config)), COMMAND, "--overwrite")
    corpus = open_corpus(config.data.dataset, config.data.text_field)
    subjects = _inhouse(config, world) if config.model is None else _checkpoint(config, world)

    def stream(tokens: int = 2**62):
        return batches(corpus.texts(), subjects.tokenizer, config.data.seq_len, config.data.batch_size, tokens)

    batch_list = [(b.input_ids, b.attention_mask)
                  for b in stream(config.batches * config.data.batch_size * config.data.seq_len)][: config.batches]
    if not batch_list:
        raise empty_corpus_error(corpus.spec)
    # One job per (placement, seed), seed by seed, so placements of one seed follow each other (shared init).
    # Under torchrun rank r runs jobs r, r + world, ... (each seeds its own model) and rank 0 writes the folder.
    seeds = 1 if config.model is not None and not config.reinit else config.seeds
    cases = subjects.cases
    jobs_all = [((case, seed), *cases[case], seed) for seed in range(seeds) for case in range(len(cases))]
    world.refuse_idle(len(jobs_all), "model(s) (placements x seeds)")
    mine = [job for index, job in enumerate(jobs_all) if index % world.size == world.rank]
    store = _open_store(config, world, subjects)
    reset_peak_memory(str(subjects.device))
    # progress in training steps, or at init in forward + backward passes (a 7B model is one job of minutes)
    units = 1 + config.train.steps if config.train.steps else len(batch_list)
    jobs = _Jobs(config, subjects, batch_list, steps, store, progress, "steps" if config.train.steps else "passes",
                 units, len(mine) * units)
    warnings: list[str] = []
    found = _run_jobs(jobs, mine, stream, warnings)
    gathered = world.gather((found, warnings, jobs.resumed))
    if not world.main:
        return GradnormRun(None, warnings=warnings)
    warnings = list(dict.fromkeys(w for part in gathered for w in part[1]))
    resumed = sum(part[2] for part in gathered)
    if resumed:
        warnings.append(f"--resume: {resumed} finished job(s) read from '{store.dir}', {len(jobs_all) - resumed} run now.")
    tables = aggregate(*([pair for part in gathered for pair in getattr(part[0], name)] for name in _Found.NAMES))
    facts = {"model": subjects.name, "arch": config.arch if config.model is None else None,
             "dataset": corpus.description, "seq_len": config.data.seq_len, "batch_size": config.data.batch_size,
             "seeds": config.seeds, "batches": len(batch_list), "device": str(subjects.device),
             "dtype": subjects.dtype, "steps": config.train.steps, "record_steps": steps,
             "peak_gpu_memory_gib": peak_memory_gib(str(subjects.device))}
    if config.train.steps:
        facts |= {"lr": config.train.lr, "warmup": config.train.warmup, "clip": config.train.clip,
                  "monitor_every": monitor_every(config)}
    run = write_gradnorm_outputs(store.dir.parent, tables, config, facts, started, time.perf_counter() - clock,
                                 warnings)
    store.clear()  # the outputs are written: nothing left to resume
    return run
