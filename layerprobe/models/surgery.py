"""Model surgery as context managers that undo themselves: removed_layers(model, [3, 4])."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from layerprobe.errors import ArchitectureError
from layerprobe.models.layers import BlockStack, find_blocks, layer_index_owners, text_config


def check_indices(indices: Iterable[int], num_layers: int) -> list[int]:
    """Sorted unique layer indices, each within 0..num_layers-1."""
    chosen = sorted(set(indices))
    bad = [i for i in chosen if not 0 <= i < num_layers]
    if bad:
        raise ArchitectureError(
            f"Layer(s) {', '.join(map(str, bad))} out of range: the model has layers 0..{num_layers - 1}."
        )
    if len(chosen) >= num_layers:
        raise ArchitectureError(f"Cannot remove all {num_layers} layers: keep at least one.")
    return chosen


@contextmanager
def removed_layers(model: Any, indices: Iterable[int], stack: BlockStack | None = None) -> Iterator[BlockStack]:
    """Remove blocks in place (no weight copies); on exit the model is exactly as before.

    Keeps the rest consistent while pruned: config.num_hidden_layers, config.layer_types (per-layer
    attention kinds of sliding-window models) and each block's `layer_idx` are renumbered.
    """
    import torch.nn as nn

    stack = stack or find_blocks(model)
    original = stack.blocks
    drop = set(check_indices(indices, len(original)))
    keep = [i for i in range(len(original)) if i not in drop]
    config = text_config(model)
    saved_count = config.num_hidden_layers
    saved_types = getattr(config, "layer_types", None)
    saved_idx = [(m, m.layer_idx) for block in original for m in layer_index_owners(block)]
    try:
        # A new list built from the kept blocks: no deletion-order bugs, the original list stays intact.
        pruned = nn.ModuleList([original[i] for i in keep])
        setattr(stack.parent, stack.attr, pruned)
        config.num_hidden_layers = len(keep)
        if saved_types is not None:
            config.layer_types = [saved_types[i] for i in keep]
        for new_index, old_index in enumerate(keep):
            for m in layer_index_owners(original[old_index]):
                m.layer_idx = new_index
        yield BlockStack(stack.path, stack.parent, stack.attr, pruned)
    finally:
        setattr(stack.parent, stack.attr, original)
        config.num_hidden_layers = saved_count
        if saved_types is not None:
            config.layer_types = saved_types
        for m, value in saved_idx:
            m.layer_idx = value
