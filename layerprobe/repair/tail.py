"""heal --method tail: train only the LM head and the last few kept blocks of the shortened model ("Reassessing
Layer Pruning in LLMs", ICLR 2026, finds this beats LoRA at an equal budget). Where the head is tied to the input
embeddings (SmolLM2) the shared matrix is trained, so the embeddings move with it."""

from __future__ import annotations

from typing import Any

from layerprobe.errors import ConfigError
from layerprobe.models.layers import BlockStack


def tail_only_trainable(model: Any, short: BlockStack, blocks: int) -> list[str]:
    """Freeze everything but the output head and the last `blocks` of `short`; the trained modules' paths."""
    if blocks > len(short):
        raise ConfigError(f"--tail-blocks {blocks}: the shortened model keeps {len(short)} blocks: pass "
                          f"{len(short)} or fewer.")
    head = model.get_output_embeddings()
    if head is None:
        raise ConfigError(f"{type(model).__name__} has no output head to train: use --method lora.")
    names = {id(m): n for n, m in model.named_modules()}
    trained = [head, *short.blocks[len(short) - blocks:]]
    for p in model.parameters():
        p.requires_grad_(False)
    for module in trained:
        for p in module.parameters():
            p.requires_grad_(True)
    return [names[id(m)] for m in trained]
