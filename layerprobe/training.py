"""A short AdamW pre-training loop (the papers' recipe) for watching gradients and variance move with training."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class TrainSettings:
    """AdamW with linear warmup then cosine decay to 10% of the peak, gradient clipping at `clip`."""

    steps: int = 0  # optimizer updates; 0 = measure at initialization only
    lr: float = 1e-3  # peak learning rate
    warmup: int = 0  # linear warmup steps
    clip: float = 1.0  # max global gradient norm (0 = no clipping)
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)


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

    from layerprobe.models.device_map import input_device
    from layerprobe.models.layers import loss_only_kwargs

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
