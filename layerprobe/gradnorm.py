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


def _input_grads(stack: Any):
    """Pre-hooks that keep the gradient of each block's input; returns (handles, list filled per forward)."""
    inputs: list = [None] * len(stack.blocks)

    def make(index: int):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if not args else args[0]
            if hidden.requires_grad:
                hidden.retain_grad()
            inputs[index] = hidden

        return hook

    handles = [b.register_forward_pre_hook(make(i), with_kwargs=True) for i, b in enumerate(stack.blocks)]
    return handles, inputs


def masked_lm_batch(ids: Any, tokenizer: Any, generator: Any) -> tuple[Any, Any]:
    """BERT-style masking of 15% of the non-special tokens: (inputs, labels with -100 elsewhere)."""
    import torch

    special = torch.tensor([[t in tokenizer.all_special_ids for t in row] for row in ids.tolist()])
    chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & ~special
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = torch.where(chosen, torch.full_like(ids, tokenizer.mask_token_id), ids)
    return inputs, labels


def measure(model: Any, stack: Any, batch_list: list, encoder: bool, tokenizer: Any, seed: int) -> list[dict]:
    """One gradient per batch; rows of (batch, layer, kind, module, grad_norm)."""
    import torch

    from layerprobe.metrics.gradients import input_grad_norm, parameter_grad_norms

    rows = []
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    handles, inputs = _input_grads(stack)
    try:
        for b, (ids, mask) in enumerate(batch_list):
            model.zero_grad(set_to_none=True)
            if encoder:
                inp, labels = masked_lm_batch(ids, tokenizer, generator)
            else:
                inp, labels = ids, ids
            out = model(input_ids=inp.to(device), attention_mask=mask.to(device), labels=labels.to(device))
            if out.loss is None:
                raise ModelLoadError("The model returned no loss: gradnorm needs a causal or masked LM head.")
            out.loss.backward()
            for layer, block in enumerate(stack.blocks):
                for module, value in parameter_grad_norms(block).items():
                    rows.append({"batch": b, "layer": layer, "kind": "params", "module": module, "grad_norm": value})
                grad = inputs[layer].grad if inputs[layer] is not None else None
                if grad is not None:
                    rows.append({"batch": b, "layer": layer, "kind": "input", "module": "block",
                                 "grad_norm": input_grad_norm(grad, mask.to(grad.device))})
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    return rows


def run_gradnorm(config: GradnormConfig, progress: Progress = silent) -> GradnormRun:
    """Build (or load) each model at init, backpropagate real-token batches, record per-layer norms."""
    import pandas as pd
    import torch

    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import batches, check_sizes, empty_corpus_error
    from layerprobe.models.inhouse import PLACEMENTS, ProbeLlamaForCausalLM, make_config
    from layerprobe.models.layers import find_blocks
    from layerprobe.runs.folder import prepare_run_dir, slug
    from layerprobe.runs.manifest import start_time

    started, clock = start_time(), time.perf_counter()
    if config.seeds <= 0 or config.batches <= 0:
        raise ConfigError("--seeds and --batches must be positive integers.")
    check_sizes(1, config.data.seq_len, config.data.batch_size)
    if config.reinit and config.model is None:
        raise ConfigError("--reinit re-initializes a checkpoint from its config: pass MODEL too.")
    for norm in config.norms:
        if norm not in PLACEMENTS:
            raise ConfigError(f"Unknown placement '{norm}' in --norm: use {', '.join(PLACEMENTS)}.")
    corpus = open_corpus(config.data.dataset, config.data.text_field)
    warnings: list[str] = []
    torch.set_grad_enabled(True)

    if config.model is None:
        import transformers

        from layerprobe.models.load import embedded_model_dir, resolve_device

        tokenizer_spec = config.tokenizer or str(embedded_model_dir())
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_spec)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"Could not load tokenizer '{tokenizer_spec}': {str(exc).splitlines()[0]}.") from None
        device = resolve_device(config.device)
        make_config(config.arch, config.norms[0], mix_alpha=config.alpha, norm_type=config.norm_type)  # validate early
        cases = [(norm, None) for norm in config.norms]
        name = config.arch
        encoder = False
    else:
        from layerprobe.models.load import load_model

        from layerprobe.models.layers import ENCODER_MODEL_TYPES
        from layerprobe.models.load import peek_model_type

        # Encoders get a masked-LM loss, decoders a causal one: decided from the config, loaded once.
        encoder = peek_model_type(config.model.model, config.model.revision,
                                  config.model.trust_remote_code) in ENCODER_MODEL_TYPES
        loaded = load_model(config.model.model, head="masked-lm" if encoder else "causal-lm", dtype="float32",
                            device=config.model.device, revision=config.model.revision,
                            trust_remote_code=config.model.trust_remote_code)
        tokenizer, device, name = loaded.tokenizer, loaded.device, loaded.spec
        cases = [("reinit" if config.reinit else "as-is", loaded)]

    tokens = config.batches * config.data.batch_size * config.data.seq_len
    batch_list = [(b.input_ids, b.attention_mask) for b in
                  batches(corpus.texts(), tokenizer, config.data.seq_len, config.data.batch_size, tokens)][: config.batches]
    if not batch_list:
        raise empty_corpus_error(corpus.spec)
    rows = []
    total = len(cases) * config.seeds
    progress("models", 0, total)
    for index, (norm, loaded) in enumerate(cases):
        for seed in range(config.seeds):
            torch.manual_seed(seed)
            if loaded is None:
                cfg = make_config(config.arch, norm, mix_alpha=config.alpha, norm_type=config.norm_type,
                                  vocab_size=len(tokenizer), max_position_embeddings=max(1024, config.data.seq_len))
                model = ProbeLlamaForCausalLM(cfg).to(device)
            elif config.reinit:
                model = type(loaded.model)._from_config(loaded.model.config).to(device)
            else:
                model = loaded.model
            model.eval()  # no dropout: the gradient of the deterministic network
            stack = find_blocks(model, config.model.layers_path if config.model else None)
            for row in measure(model, stack, batch_list, encoder, tokenizer, seed):
                rows.append({"norm": norm, "seed": seed, **row})
            progress("models", index * config.seeds + seed + 1, total)
            if loaded is not None and not config.reinit:
                break  # trained weights: seeds would repeat the same numbers
    raw = pd.DataFrame(rows)
    grouped = raw.groupby(["norm", "layer", "kind", "module"], sort=False)["grad_norm"]
    table = grouped.agg(grad_norm="mean", std="std", samples="count").reset_index()
    table["std"] = table["std"].fillna(0.0)
    seconds = time.perf_counter() - clock
    out = config.out or str(Path("reports") / slug(name) / "gradnorm")
    folder = prepare_run_dir(out, overwrite=config.overwrite)
    from layerprobe.gradnorm_report import write_gradnorm_outputs

    facts = {"model": name, "arch": config.arch if config.model is None else None, "dataset": corpus.description,
             "seq_len": config.data.seq_len, "batch_size": config.data.batch_size, "seeds": config.seeds,
             "batches": len(batch_list), "device": str(device), "dtype": "float32"}
    return write_gradnorm_outputs(folder, raw, table, config, facts, started, seconds, warnings)
