"""Model surgery as context managers that undo themselves: removed_layers(model, [3, 4])."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from layerprobe.errors import ArchitectureError
from layerprobe.hook_owner import owned_hooks
from layerprobe.models.layers import (BlockStack, Sublayer, find_blocks, find_sublayer, layer_count_field,
                                      layer_index_owners, text_config)


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


# Config fields that describe the layers one by one (transformers families that have them):
PER_LAYER_LISTS = ("layer_types", "no_rope_layers", "layers_block_type")  # one entry per layer: kept entries stay
LAYER_ID_LISTS = ("mlp_only_layers", "moe_layers")  # lists of layer ids: renumbered, removed ones dropped
LEADING_COUNTS = ("max_window_layers", "first_k_dense_replace")  # "the first n layers": n recounted over kept ones


def per_layer_fields(config: Any, keep: list[int]) -> dict[str, Any]:
    """The per-layer config fields as they read with only the `keep` layers left, renumbered 0..len(keep)-1."""
    num_layers = config.num_hidden_layers
    own = vars(config)  # set on the config itself (a derived property, e.g. Jamba's layers_block_type, follows)
    fields: dict[str, Any] = {}
    for name in PER_LAYER_LISTS:
        value = own.get(name)
        if isinstance(value, (list, tuple)) and len(value) == num_layers:
            fields[name] = [value[i] for i in keep]
    for name in LAYER_ID_LISTS:
        value = own.get(name)
        if isinstance(value, (list, tuple)):
            fields[name] = [keep.index(i) for i in value if i in keep]
    for name in LEADING_COUNTS:
        value = own.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            fields[name] = sum(1 for i in keep if i < value)
    return fields


def _replay_module(reference: Any) -> Any:
    import torch.nn as nn

    class _Replay(nn.Module):
        """Stands in for the whole block stack: returns a hidden state computed elsewhere, in the form the last block
        returned it (a tensor, or a tuple with the same other items). Attributes the model's forward reads from a
        block (ModernBERT's attention_type, ...) are the reference block's."""

        def __init__(self) -> None:
            super().__init__()
            self.value: Any = None  # (batch, seq, d), set before each call
            self.as_tuple = False
            self.rest: tuple = ()
            self.__dict__["_reference"] = reference  # not a submodule: no parameters, no hooks

        def like(self, capture: Any) -> None:
            """Return what the captured last block returned: a tuple of the same length, or a tensor."""
            self.as_tuple, self.rest = capture.output_is_tuple, capture.output_rest

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return (self.value, *self.rest) if self.as_tuple else self.value

        def __getattr__(self, name: str) -> Any:
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self.__dict__["_reference"], name)

    return _Replay()


@contextmanager
def tail_only(model: Any, stack: BlockStack) -> Iterator[Any]:
    """While active, model(...) skips its blocks and runs embeddings -> replay.value -> final norm, head: the model's
    own tail on a hidden state computed elsewhere (shared-prefix pruning, the logit lens)."""
    replay = _replay_module(stack.blocks[len(stack) - 1])
    with removed_layers(model, range(1, len(stack)), stack) as single:
        single.blocks[0] = replay  # replaces an entry of the temporary list only
        yield replay


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
    count = layer_count_field(model, stack)
    changed = {count: len(keep), **(per_layer_fields(config, keep) if count == "num_hidden_layers" else {})}
    saved = {name: getattr(config, name) for name in changed}
    saved_idx = [(m, m.layer_idx) for block in original for m in layer_index_owners(block)]
    try:
        # A new list built from the kept blocks: no deletion-order bugs, the original list stays intact.
        pruned = nn.ModuleList([original[i] for i in keep])
        setattr(stack.parent, stack.attr, pruned)
        for name, value in changed.items():
            setattr(config, name, value)
        for new_index, old_index in enumerate(keep):
            for m in layer_index_owners(original[old_index]):
                m.layer_idx = new_index
        yield BlockStack(stack.path, stack.parent, stack.attr, pruned, stack.sublayer)
    finally:
        setattr(stack.parent, stack.attr, original)
        for name, value in saved.items():
            setattr(config, name, value)
        for m, value in saved_idx:
            m.layer_idx = value


def _removed_output(module: Any, residual_arg: str | None):
    """A forward hook that replaces the module's output (a tensor, or the first item of a tuple) by what a removed
    sub-layer gives: zero, or the residual argument (`residual_arg`) for a module that adds the residual itself."""
    import inspect

    import torch

    signature = inspect.signature(module.forward)

    def hook(module, args, kwargs, output):
        first = output[0] if isinstance(output, tuple) else output
        if residual_arg is None:
            value = torch.zeros_like(first)
        else:
            value = signature.bind_partial(*args, **kwargs).arguments[residual_arg]
        return (value, *output[1:]) if isinstance(output, tuple) else value

    return hook


def removal_target(sublayer: Sublayer, how: str) -> tuple[Any, str | None]:
    """(module to hook, residual argument or None) that removes a sub-layer: `branch` zeroes what the block adds to
    its residual stream and keeps every norm; `module` skips a module that adds the residual itself, its norm with
    it (Post-LN BERT: output = x instead of LayerNorm(x + 0)). Pre-LN sub-layers are their branch: both agree."""
    if how == "module" or sublayer.residual_arg is None:
        return sublayer.module, sublayer.residual_arg
    return sublayer.branch, None


@contextmanager
def removed_sublayers(model: Any, indices: Iterable[int], part: str, stack: BlockStack | None = None) -> Iterator[None]:
    """Remove the attention (part='attn') or MLP ('mlp') sub-layer of the chosen blocks, keeping the residual path,
    as `stack.sublayer` defines it (removal_target): forward hooks, all removed on exit. The blocks themselves stay, so layer ids and caches are unchanged."""
    stack = stack or find_blocks(model)
    chosen = sorted(set(indices))
    bad = [i for i in chosen if not 0 <= i < len(stack)]
    if bad:
        raise ArchitectureError(f"Layer(s) {', '.join(map(str, bad))} out of range: the model has layers "
                                f"0..{len(stack) - 1}.")
    with owned_hooks() as hooks:
        for index in chosen:
            module, residual_arg = removal_target(find_sublayer(model, stack.blocks[index], part), stack.sublayer)
            hooks.add(module.register_forward_hook(_removed_output(module, residual_arg), with_kwargs=True))
        yield


@contextmanager
def removed(model: Any, indices: Iterable[int], part: str = "block",
            stack: BlockStack | None = None) -> Iterator[BlockStack]:
    """Whole blocks (part='block') or one kind of sub-layer of each (attn, mlp) removed, undone on exit; yields the
    blocks as they are meanwhile."""
    stack = stack or find_blocks(model)
    if part == "block":
        with removed_layers(model, indices, stack) as short:
            yield short
    else:
        with removed_sublayers(model, indices, part, stack):
            yield stack
