"""Language-model losses on real tokens, and a short AdamW pre-training loop (the papers' recipe) for watching
gradients and variance move with training."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from layerprobe.config import TrainSettings
from layerprobe.errors import ModelLoadError
from layerprobe.models.device_map import input_device
from layerprobe.models.layers import loss_only_kwargs


def lr_factor(step: int, settings: TrainSettings) -> float:
    """Multiplier of the peak lr at update `step` (0-based)."""
    if settings.warmup and step < settings.warmup:
        return (step + 1) / settings.warmup
    span = max(1, settings.steps - settings.warmup)
    progress = min(1.0, (step - settings.warmup) / span)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train(model: Any, stream: Iterator[tuple[Any, Any, Any]], settings: TrainSettings,
          on_step: Callable[[int, float], None]) -> None:
    """Run settings.steps updates on (input_ids, attention_mask, labels) batches; on_step(step, loss) after each."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=settings.betas, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, settings))
    device = input_device(model)
    for step in range(1, settings.steps + 1):
        ids, mask, labels = (t.to(device) for t in next(stream))
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **loss_only_kwargs(model)).loss
        loss.backward()
        if settings.clip:
            torch.nn.utils.clip_grad_norm_(params, settings.clip)
        optimizer.step()
        schedule.step()
        on_step(step, float(loss.detach()))
    optimizer.zero_grad(set_to_none=True)


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
    device = input_device(model)
    inp, mask, labels = lm_inputs(ids, mask, encoder, tokenizer, generator)
    out = model(input_ids=inp.to(device), attention_mask=mask.to(device), labels=labels.to(device),
                **loss_only_kwargs(model))
    if out.loss is None:
        raise ModelLoadError("The model returned no loss: gradnorm needs a causal or masked LM head.")
    return out.loss
