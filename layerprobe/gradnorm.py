"""run_gradnorm(config): per-layer gradient norms at initialization for each normalization placement."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.config import GradnormConfig
from layerprobe.errors import ConfigError, ModelLoadError
from layerprobe.progress import Progress, silent


@dataclass
class GradnormRun:
    folder: Path
    table: Any  # DataFrame: norm, layer, kind, module, grad_norm, std, samples
    summary: dict
    warnings: list[str] = field(default_factory=list)


def _block_hooks(stack: Any, inputs: list, variances: list):
    """Pre-hooks keeping each block's input (and its gradient); post-hooks storing each output's variance."""
    from layerprobe.hooks import block_hidden

    def pre(index: int):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if not args else args[0]
            if not hidden.requires_grad:  # nothing below needs a gradient (embeddings frozen): start the graph here
                hidden = hidden.detach().requires_grad_(True)
                args, kwargs = ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})
            hidden.retain_grad()
            inputs[index] = hidden
            return args, kwargs

        return hook

    def post(index: int):
        def hook(module, args, output):
            variances[index] = block_hidden(output).detach()

        return hook

    handles = [b.register_forward_pre_hook(pre(i), with_kwargs=True) for i, b in enumerate(stack.blocks)]
    return handles + [b.register_forward_hook(post(i)) for i, b in enumerate(stack.blocks)]


def masked_lm_batch(ids: Any, tokenizer: Any, generator: Any) -> tuple[Any, Any]:
    """BERT-style masking of 15% of the non-special tokens: (inputs, labels with -100 elsewhere)."""
    import torch

    special = torch.tensor([[t in tokenizer.all_special_ids for t in row] for row in ids.tolist()])
    chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & ~special
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = torch.where(chosen, torch.full_like(ids, tokenizer.mask_token_id), ids)
    return inputs, labels


def lm_inputs(ids: Any, mask: Any, encoder: bool, tokenizer: Any, generator: Any) -> tuple[Any, Any, Any]:
    """(inputs, attention mask, labels): labels = inputs for a causal LM (the model shifts), BERT masking else."""
    inp, labels = masked_lm_batch(ids, tokenizer, generator) if encoder else (ids, ids)
    return inp, mask, labels


def lm_loss(model: Any, ids: Any, mask: Any, encoder: bool, tokenizer: Any, generator: Any) -> Any:
    """Causal LM loss or masked-LM loss for encoders."""
    from layerprobe.models.layers import loss_only_kwargs
    from layerprobe.models.device_map import input_device

    device = input_device(model)
    inp, mask, labels = lm_inputs(ids, mask, encoder, tokenizer, generator)
    out = model(input_ids=inp.to(device), attention_mask=mask.to(device), labels=labels.to(device),
                **loss_only_kwargs(model))
    if out.loss is None:
        raise ModelLoadError("The model returned no loss: gradnorm needs a causal or masked LM head.")
    return out.loss


def measure(model: Any, stack: Any, batch_list: list, encoder: bool, tokenizer: Any, seed: int,
            on_batch: Any = None) -> list[dict]:
    """One gradient per batch; rows of (batch, layer, kind, module, grad_norm) and (batch, layer, variance).
    on_batch() is called after each batch's pass."""
    import torch

    from layerprobe.metrics.gradients import GradSquares, input_grad_norm, output_variance

    rows = []
    generator = torch.Generator().manual_seed(seed)
    inputs: list = [None] * len(stack.blocks)
    outputs: list = [None] * len(stack.blocks)
    handles = _block_hooks(stack, inputs, outputs)
    # Only the blocks' gradients are reported: skip the weight gradients of embeddings, final norm and LM head
    # (the LM head's alone is ~7% of the compute of a llama-130m pass).
    in_blocks = {id(p) for block in stack.blocks for p in block.parameters()}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in in_blocks]
    for param in frozen:
        param.requires_grad_(False)
    try:
        with GradSquares(stack.blocks) as squares:
            for b, (ids, mask) in enumerate(batch_list):
                model.zero_grad(set_to_none=True)
                squares.reset()
                lm_loss(model, ids, mask, encoder, tokenizer, generator).backward()
                for layer in range(len(stack.blocks)):
                    for module, value in squares.norms(layer).items():
                        rows.append({"batch": b, "layer": layer, "kind": "params", "module": module,
                                     "grad_norm": value})
                    grad = inputs[layer].grad if inputs[layer] is not None else None
                    if grad is not None:
                        rows.append({"batch": b, "layer": layer, "kind": "input", "module": "block",
                                     "grad_norm": input_grad_norm(grad, mask.to(grad.device))})
                    rows.append({"batch": b, "layer": layer, "kind": "variance", "module": "block",
                                 "variance": output_variance(outputs[layer], mask.to(outputs[layer].device))})
                    inputs[layer] = outputs[layer] = None
                if on_batch is not None:
                    on_batch()
    finally:
        for handle in handles:
            handle.remove()
        for param in frozen:
            param.requires_grad_(True)
        model.zero_grad(set_to_none=True)
        inputs.clear()
        outputs.clear()
    return rows


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


def run_gradnorm(config: GradnormConfig, progress: Progress = silent) -> GradnormRun:
    """Build (or load) each model, backpropagate real-token batches at init (and after training steps),
    record per-layer gradient norms and output variance."""
    import pandas as pd
    import torch

    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import batches, check_sizes, empty_corpus_error
    from layerprobe.distributed import current_world
    from layerprobe.models.inhouse import PLACEMENTS, build, make_config, shares_init
    from layerprobe.models.layers import find_blocks
    from layerprobe.models.device_map import peak_memory_gib, reset_peak_memory
    from layerprobe.models.load import resolve_device, resolve_dtype
    from layerprobe.runs.folder import prepare_run_dir, slug
    from layerprobe.runs.jobs import JobStore
    from layerprobe.runs.manifest import start_time
    from layerprobe.training import train

    started, clock = start_time(), time.perf_counter()
    world = current_world()
    progress = progress if world.main else silent
    world.refuse_device_map(config.model.device_map if config.model else None)
    if config.seeds <= 0 or config.batches <= 0:
        raise ConfigError("--seeds and --batches must be positive integers.")
    check_sizes(1, config.data.seq_len, config.data.batch_size)
    if config.reinit and config.model is None:
        raise ConfigError("--reinit re-initializes a checkpoint from its config: pass MODEL too.")
    if config.reinit and config.model.device_map:
        raise ConfigError("--reinit builds the fresh model on one device: drop --device-map, or measure the "
                          "checkpoint as it is.")
    for norm in config.norms:
        if norm not in PLACEMENTS:
            raise ConfigError(f"Unknown placement '{norm}' in --norm: use {', '.join(PLACEMENTS)}.")
    steps = record_steps(config.record_steps, config.train.steps)
    if config.train.steps and (config.train.lr <= 0 or config.train.warmup < 0 or config.train.clip < 0):
        raise ConfigError("--lr must be positive and --warmup, --clip 0 or more.")
    if config.model is not None:
        from layerprobe.models.load import locate

        locate(config.model.model)  # a missing or broken folder is named before any dataset problem
    corpus = open_corpus(config.data.dataset, config.data.text_field)
    warnings: list[str] = []
    torch.set_grad_enabled(True)

    if config.model is None:
        import transformers

        from layerprobe.models.load import embedded_model_dir

        tokenizer_spec = config.tokenizer or str(embedded_model_dir())
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_spec)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"Could not load tokenizer '{tokenizer_spec}': {str(exc).splitlines()[0]}.") from None
        device = resolve_device(world.device(config.device))
        dtype = resolve_dtype(config.dtype, device)
        make_config(config.arch, config.norms[0], mix_alpha=config.alpha, norm_type=config.norm_type)  # validate early
        cases = [(norm, None) for norm in config.norms]
        name = config.arch
        encoder = False
    else:
        from layerprobe.models.layers import ENCODER_MODEL_TYPES
        from layerprobe.models.load import load_model, peek_model_type

        # Encoders get a masked-LM loss, decoders a causal one: decided from the config, loaded once.
        encoder = peek_model_type(config.model.model, config.model.revision,
                                  config.model.trust_remote_code) in ENCODER_MODEL_TYPES
        loaded = load_model(config.model.model, head="masked-lm" if encoder else "causal-lm", dtype=config.dtype,
                            device=world.device(config.model.device), revision=config.model.revision,
                            trust_remote_code=config.model.trust_remote_code,
                            device_map=config.model.device_map, offload=config.model.offload)
        tokenizer, device, name, dtype = loaded.tokenizer, loaded.device, loaded.spec, loaded.dtype
        if loaded.new_head and not config.reinit:
            raise ModelLoadError(
                f"'{name}' has no trained {'masked' if encoder else 'causal'}-LM head ({', '.join(loaded.new_head[:3])} "
                "missing), so its loss would go through random weights: pass --reinit to measure at initialization, "
                "or a checkpoint saved with its LM head."
            )
        offloaded = sum(p.numel() for p in loaded.model.parameters() if p.device.type == "meta")
        if offloaded:
            raise ConfigError(f"gradnorm needs every weight resident on a device, and {offloaded:,} parameters of "
                              f"'{name}' are offloaded (--offload {config.model.offload}): use more GPUs or no offload.")
        cases = [("reinit" if config.reinit else "as-is", loaded)]

    def stream(tokens: int = 2**62):
        return batches(corpus.texts(), tokenizer, config.data.seq_len, config.data.batch_size, tokens)

    tokens = config.batches * config.data.batch_size * config.data.seq_len
    batch_list = [(b.input_ids, b.attention_mask) for b in stream(tokens)][: config.batches]
    if not batch_list:
        raise empty_corpus_error(corpus.spec)
    # One job per (placement, seed), seed by seed: the placements of one seed follow each other, so at init
    # those with the plain LLaMA init take over one model's weights instead of drawing them again (shares_init).
    # Under torchrun rank r runs jobs r, r + world, ... (each seeds its own model, so the numbers do not depend
    # on the number of processes) and rank 0 writes the run folder, rows in placement-then-seed order.
    seeds = 1 if config.model is not None and not config.reinit else config.seeds
    jobs = [((case, seed), *cases[case], seed) for seed in range(seeds) for case in range(len(cases))]
    world.refuse_idle(len(jobs), "model(s) (placements x seeds)")
    mine = [job for index, job in enumerate(jobs) if index % world.size == world.rank]
    # The run folder exists from here on: each finished job is saved in <out>/jobs/ (JobStore), so --resume
    # after a crash or Ctrl-C redoes only the unfinished ones. Rank 0 sets it up; every rank saves its own jobs.
    out = config.out or str(Path("reports") / slug(name) / "gradnorm")
    identity = {k: v for k, v in config.to_dict().items() if k not in ("out", "overwrite", "resume", "formats")}
    store = None
    if world.main:
        folder = prepare_run_dir(out, overwrite=config.overwrite, resume=config.resume)
        store = JobStore(folder, identity, config.resume)
    folder = Path(world.gather(str(folder) if world.main else None)[0])
    store = store or JobStore(folder, identity, config.resume, owner=False)
    rows, losses = [], []
    reset_peak_memory(str(device))
    # progress in training steps, or at init in forward + backward passes (a 7B model is one job of minutes)
    stage = "steps" if config.train.steps else "passes"
    units = 1 + config.train.steps if config.train.steps else len(batch_list)  # per job
    total = len(mine) * units
    done = resumed = 0
    progress(stage, 0, total)

    def advance() -> None:
        nonlocal done
        done += 1
        progress(stage, done, total)
    previous = None  # (seed, model) of the last in-house model, while its untrained weights may be reused
    for job, norm, loaded, seed in mine:
        name_of_job = f"{norm}-seed{seed}"
        saved = store.load(name_of_job)
        if saved is not None:  # finished before an interruption
            rows += [(job, row) for row in saved["rows"]]
            losses += [(job, row) for row in saved["losses"]]
            resumed += 1
            done += units
            progress(stage, done, total)
            continue
        first_row, first_loss = len(rows), len(losses)
        torch.manual_seed(seed)
        if loaded is None:
            cfg = make_config(config.arch, norm, mix_alpha=config.alpha, norm_type=config.norm_type,
                              vocab_size=len(tokenizer), max_position_embeddings=max(1024, config.data.seq_len))
            like = previous[1] if previous and previous[0] == seed and shares_init(previous[1].config, cfg) else None
            previous = None  # not reusable: freed before the next model is built
            model = build(cfg, device, getattr(torch, dtype), like=like)
            like = None
            if not config.train.steps:
                previous = (seed, model)
        elif config.reinit:
            model = type(loaded.model)._from_config(loaded.model.config).to(device)
        else:
            model = loaded.model  # trained weights: one job, seeds would repeat the same numbers
        model.eval()  # no dropout: the gradient of the deterministic network
        stack = find_blocks(model, config.model.layers_path if config.model else None)

        def record(step: int) -> None:
            passes = None if config.train.steps else advance
            for row in measure(model, stack, batch_list, encoder, tokenizer, seed, on_batch=passes):
                rows.append((job, {"norm": norm, "seed": seed, "step": step, **row}))

        if 0 in steps:
            record(0)
        if config.train.steps:
            advance()
            generator = torch.Generator().manual_seed(seed)
            source = _cycle(stream, warnings)
            training = (lm_inputs(ids, mask, encoder, tokenizer, generator) for ids, mask in source)

            def after(step: int, loss: float) -> None:
                losses.append((job, {"norm": norm, "seed": seed, "step": step, "loss": loss}))
                if step in steps:
                    record(step)
                advance()

            train(model, training, config.train, after)
        store.save(name_of_job, {"rows": [row for _, row in rows[first_row:]],
                                 "losses": [row for _, row in losses[first_loss:]]})
        model = stack = None  # free this model (its blocks too) before the next one is built, unless reused
    gathered = world.gather((rows, losses, warnings, resumed))
    if not world.main:
        return GradnormRun(None, None, {}, warnings)
    # every rank's (job, row) pairs in job order: the table of a single process (the sort is stable)
    rows = [row for _, row in sorted((p for part in gathered for p in part[0]), key=lambda p: p[0])]
    losses = [row for _, row in sorted((p for part in gathered for p in part[1]), key=lambda p: p[0])]
    warnings = list(dict.fromkeys(w for part in gathered for w in part[2]))
    resumed = sum(part[3] for part in gathered)
    if resumed:
        warnings.append(f"--resume: {resumed} finished job(s) read from '{store.dir}', {len(jobs) - resumed} run now.")
    raw = pd.DataFrame(rows)
    keys = ["norm", "step", "layer", "kind", "module"]
    grads = raw[raw["kind"] != "variance"].groupby(keys, sort=False)["grad_norm"]
    table = grads.agg(grad_norm="mean", std="std", samples="count").reset_index()
    table["std"] = table["std"].fillna(0.0)
    variance = raw[raw["kind"] == "variance"].groupby(["norm", "step", "layer"], sort=False)["variance"]
    variance = variance.agg(variance="mean", std="std", samples="count").reset_index()
    variance["std"] = variance["std"].fillna(0.0)
    seconds = time.perf_counter() - clock
    from layerprobe.gradnorm_report import write_gradnorm_outputs

    facts = {"model": name, "arch": config.arch if config.model is None else None, "dataset": corpus.description,
             "seq_len": config.data.seq_len, "batch_size": config.data.batch_size, "seeds": config.seeds,
             "batches": len(batch_list), "device": str(device), "dtype": dtype, "steps": config.train.steps,
             "record_steps": steps, "peak_gpu_memory_gib": peak_memory_gib(str(device))}
    if config.train.steps:
        facts |= {"lr": config.train.lr, "warmup": config.train.warmup, "clip": config.train.clip}
    run = write_gradnorm_outputs(folder, raw, table, variance, pd.DataFrame(losses), config, facts, started,
                                 seconds, warnings)
    store.clear()  # the outputs are written: nothing left to resume
    return run
