"""One way to publish a file or folder (files.publishing): a published target is whole or what it was before, and
nothing hidden is left beside it. (Owning hooks, on torch modules: tests/test_hook_owner.py.)"""

from __future__ import annotations

import os

import pytest

from layerprobe.files import FILE_MODE, publishing, umask


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
