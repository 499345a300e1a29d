"""One way to publish a file or folder (files.publishing) and one way to own hooks (hook_owner), unit tier: a
published target is whole or what it was before, nothing hidden is left beside it, and a context manager that
fails while registering its hooks leaves none behind."""

from __future__ import annotations

import os

import pytest
import torch

from layerprobe.files import FILE_MODE, publishing, umask
from layerprobe.hook_owner import HookOwner, owned_hooks


def _siblings(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_published_file_replaces_the_target_whole_with_the_umask_mode(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with publishing(target) as scratch:
        assert scratch.parent == tmp_path and scratch.name.startswith(".a.json.")
        scratch.write_text("new")
        assert target.read_text() == "old"  # nothing visible before the block ends
    assert target.read_text() == "new"
    assert os.stat(target).st_mode & 0o777 == FILE_MODE
    assert _siblings(tmp_path) == []


def test_a_failed_write_keeps_the_old_target_and_leaves_nothing(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(ValueError), publishing(target) as scratch:
        scratch.write_text("half")
        raise ValueError("killed mid-write")
    assert target.read_text() == "old" and _siblings(tmp_path) == []


def test_a_folder_is_swapped_in_whole_and_an_existing_one_is_kept_on_failure(tmp_path):
    target = tmp_path / "export"
    target.mkdir()
    (target / "weights").write_text("old")
    with pytest.raises(OSError), publishing(target, folder=True) as scratch:
        (scratch / "weights").write_text("half")
        raise OSError(28, "No space left on device")
    assert (target / "weights").read_text() == "old" and _siblings(tmp_path) == []
    with publishing(target, folder=True) as scratch:
        (scratch / "sub").mkdir()
        (scratch / "sub" / "weights").write_text("new")
    assert sorted(p.name for p in target.rglob("*")) == ["sub", "weights"]
    assert (target / "sub" / "weights").read_text() == "new" and _siblings(tmp_path) == []
    assert os.stat(target).st_mode & 0o777 == 0o777 & ~umask()  # as mkdir makes it, not mkdtemp's 0700


def test_a_folder_published_without_replace_refuses_an_existing_one(tmp_path):
    target = tmp_path / "cache"
    target.mkdir()
    (target / "info.json").write_text("{}")
    with pytest.raises(OSError), publishing(target, folder=True, replace=False) as scratch:
        (scratch / "weights").write_text("mine")
    assert sorted(p.name for p in target.iterdir()) == ["info.json"] and _siblings(tmp_path) == []


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
