"""Capture what enters and leaves each block with forward hooks: context managers that leave nothing behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerprobe.hook_owner import HookOwner, Hooks
from layerprobe.models.layers import BlockStack


def block_hidden(output: Any) -> Any:
    """The hidden state a block returns (a tensor, or the first item of a tuple in older transformers)."""
    return output[0] if isinstance(output, (tuple, list)) else output


@dataclass
class BlockCall:
    """How a block was called, minus its hidden state: replayed to run the block again."""

    args: tuple  # positional arguments after the hidden state
    kwargs: dict  # keyword arguments (masks, position embeddings, ...)
    hidden_in_kwargs: bool  # the hidden state came as kwargs["hidden_states"]

    def run(self, block: Any, hidden: Any) -> Any:
        if self.hidden_in_kwargs:
            return block_hidden(block(*self.args, **{**self.kwargs, "hidden_states": hidden}))
        return block_hidden(block(hidden, *self.args, **self.kwargs))


def replay_from(blocks: list, calls: list, hidden: Any, start: int, skip: frozenset | set = frozenset()) -> Any:
    """Run blocks[start:] but those in `skip` on `hidden`, each with the arguments its recorded call had: the
    state after the last block of a model whose blocks before `start` produced `hidden` (shared-prefix pruning)."""
    for j in range(start, len(blocks)):
        if j not in skip:
            hidden = calls[j].run(blocks[j], hidden)
    return hidden


def produced_inside(calls: list) -> frozenset[int]:
    """Blocks whose outputs feed later blocks' arguments: an argument a block received as None and the next one as
    a tensor was computed by the first (T5's block 0 computes the relative position bias the others receive).
    Without such a block the later ones receive something else, so a replay of their recorded calls would be wrong:
    those variants are scored by a full forward."""
    producers = set()
    for j in range(1, len(calls)):
        before, after = calls[j - 1], calls[j]
        pairs = list(zip(before.args, after.args)) + [(before.kwargs.get(k), v) for k, v in after.kwargs.items()]
        if any(a is None and b is not None for a, b in pairs):
            producers.add(j - 1)
    return frozenset(producers)


@dataclass
class BlockCapture(HookOwner):
    """Context manager: states[l] = input of block l, states[L] = output of the last block.

    With keep_calls, calls[l] records block l's other arguments so blocks can be re-run from any
    stored input (shared-prefix pruning). Tensors are references to the current forward's
    activations: read them before the next forward.
    """

    stack: BlockStack
    keep_calls: bool = False
    states: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    output_is_tuple: bool = False  # how the last block returned its hidden state
    output_rest: tuple = ()  # what else it returned beside it (attention weights, ...), so a stand-in can match

    def attach(self, hooks: Hooks) -> None:
        num = len(self.stack.blocks)
        self.states = [None] * (num + 1)
        self.calls = [None] * num
        for index, block in enumerate(self.stack.blocks):
            hooks.add(block.register_forward_pre_hook(self._pre_hook(index), with_kwargs=True))
        hooks.add(self.stack.blocks[num - 1].register_forward_hook(self._post_hook(num)))

    def detach(self) -> None:
        self.states = []
        self.calls = []

    def _pre_hook(self, index: int):
        def hook(module, args, kwargs):
            in_kwargs = not args
            self.states[index] = kwargs["hidden_states"] if in_kwargs else args[0]
            if self.keep_calls:
                rest_kwargs = {k: v for k, v in kwargs.items() if k != "hidden_states"} if in_kwargs else kwargs
                self.calls[index] = BlockCall(tuple(args[1:]), dict(rest_kwargs), in_kwargs)
            return None

        return hook

    def _post_hook(self, index: int):
        def hook(module, args, output):
            self.states[index] = block_hidden(output)
            self.output_is_tuple = isinstance(output, tuple)
            self.output_rest = tuple(output[1:]) if self.output_is_tuple else ()
            return None

        return hook


@dataclass
class GradientCapture(HookOwner):
    """Context manager for a backward pass: inputs[l] = block l's input, kept with its gradient (retain_grad),
    outputs[l] = block l's output, detached. Where nothing below needs a gradient (frozen embeddings), the graph
    starts at the block input. The lists are reset per forward by the caller (`clear()`)."""

    stack: BlockStack
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def attach(self, hooks: Hooks) -> None:
        num = len(self.stack.blocks)
        self.inputs, self.outputs = [None] * num, [None] * num
        for index, block in enumerate(self.stack.blocks):
            hooks.add(block.register_forward_pre_hook(self._pre_hook(index), with_kwargs=True))
            hooks.add(block.register_forward_hook(self._post_hook(index)))

    def detach(self) -> None:
        self.inputs, self.outputs = [], []

    def clear(self, index: int) -> None:
        self.inputs[index] = self.outputs[index] = None

    def _pre_hook(self, index: int):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if not args else args[0]
            if not hidden.requires_grad:
                hidden = hidden.detach().requires_grad_(True)
                args, kwargs = ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})
            hidden.retain_grad()
            self.inputs[index] = hidden
            return args, kwargs

        return hook

    def _post_hook(self, index: int):
        def hook(module, args, output):
            self.outputs[index] = block_hidden(output).detach()

        return hook
