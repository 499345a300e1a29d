"""One way to own hooks (hook_owner): a context manager that fails while registering its hooks leaves none behind,
and the library's hook owners roll back alike. Default tier: on torch modules."""

from __future__ import annotations

import pytest
import torch

from layerprobe.hook_owner import HookOwner, owned_hooks


class _Fragile(torch.nn.Module):
    """A block whose hook registration fails: as a hook API that refuses a module would."""

    def register_forward_hook(self, *args, **kwargs):
        raise RuntimeError("cannot hook this module")


class _Watcher(HookOwner):
    def __init__(self, modules):
        self.modules, self.seen = modules, []

    def attach(self, hooks):
        for module in self.modules:
            hooks.add(module.register_forward_pre_hook(lambda m, args: self.seen.append(m)))
            hooks.add(module.register_forward_hook(lambda m, args, out: None))

    def detach(self):
        self.seen = []


def _hook_count(modules):
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in modules)


def test_a_hook_owner_removes_its_hooks_on_exit_and_on_a_failed_registration():
    good = [torch.nn.Linear(2, 2) for _ in range(3)]
    with _Watcher(good) as watcher:
        assert _hook_count(good) == 6
        good[0](torch.zeros(1, 2))
        assert watcher.seen == [good[0]]
    assert _hook_count(good) == 0 and watcher.seen == []
    mixed = [*good[:2], _Fragile()]
    with pytest.raises(RuntimeError, match="cannot hook"):
        with _Watcher(mixed):
            pass
    assert _hook_count(mixed) == 0  # the two blocks hooked before the failure are clean again


def test_the_library_hook_owners_roll_back_a_failed_registration():
    """BlockCapture, GradientCapture, RouterAccumulator and GradSquares are hook owners: none keeps a hook when a
    registration fails part-way (GradSquares had no rollback before)."""
    from layerprobe.hooks import BlockCapture, GradientCapture
    from layerprobe.metrics.gradients import GradSquares
    from layerprobe.metrics.router import RouterAccumulator

    assert all(issubclass(c, HookOwner) for c in (BlockCapture, GradientCapture, GradSquares, RouterAccumulator))
    blocks = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    calls = []

    def refuse_second(self, hook):
        calls.append(self)
        if len(calls) == 3:
            raise RuntimeError("no more hooks")
        return torch.Tensor.register_post_accumulate_grad_hook(self, hook)

    squares = GradSquares(blocks)
    original = torch.nn.Parameter.register_post_accumulate_grad_hook
    torch.nn.Parameter.register_post_accumulate_grad_hook = refuse_second
    try:
        with pytest.raises(RuntimeError, match="no more hooks"):
            squares.__enter__()
    finally:
        torch.nn.Parameter.register_post_accumulate_grad_hook = original
    assert all(p._post_accumulate_grad_hooks in (None, {}) for b in blocks for p in b.parameters())


def test_owned_hooks_are_removed_however_the_block_ends():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(KeyError), owned_hooks() as hooks:
        hooks.add(layer.register_forward_hook(lambda m, a, o: None))
        raise KeyError("stop")
    assert _hook_count([layer]) == 0
