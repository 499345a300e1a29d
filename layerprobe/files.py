"""One way to publish a file or a folder: write it into a hidden sibling, fsync it, rename it into place.

A reader, or a run killed at any point, finds the old target or the new one whole, never a half-written one that
looks finished; the sibling is removed on any error. Run folders (runs/folder.py), the GGUF cache (models/gguf.py),
an export and a healed checkpoint all publish through `publishing`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~umask()  # what open() would give: CI artifacts and shared folders follow the user's umask


PARTIAL_MARK = ".layerprobe"  # '<partial folder>.layerprobe', beside a private sibling folder while it is written:
# the mark that it is layerprobe's own (a resume removes a partial folder a kill left only with it)


@contextlib.contextmanager
def publishing(target: Path, folder: bool = False, replace: bool = True) -> Iterator[Path]:
    """A hidden sibling of `target` to write (a file '.<name>.<random>.tmp', or with `folder` a folder
    '.<name>.partial-<random>'), published when the block ends cleanly: every file in it made as open() would make
    it (FILE_MODE) and fsynced, then renamed onto `target` in one step. An existing target is replaced (a folder
    is swapped aside by rename and removed after), or with replace=False the rename's OSError is raised. On any
    error the sibling is removed and the error raised (an OSError as it is: each caller names its own fix)."""
    target = Path(target)
    if folder:
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        scratch.chmod(0o777 & ~umask())  # as mkdir would make it, not mkdtemp's 0700
        mark = scratch.with_name(scratch.name + PARTIAL_MARK)
        mark.write_text("layerprobe\n")
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name.lstrip('.')}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        scratch = Path(name)
    try:
        yield scratch
        for file in (p for p in scratch.rglob("*") if p.is_file()) if folder else (scratch,):
            file.chmod(FILE_MODE)  # mkstemp makes 0600 whatever the umask
            _fsync(file)
        _rename(scratch, target, folder, replace)
    except BaseException:
        remove(scratch)
        raise
    finally:
        if folder:
            mark.unlink(missing_ok=True)


def temp_file(beside: Path, data: bytes) -> Path:
    """A hidden temp file next to `beside` holding `data` on disk, with the mode open() would give, for a caller that
    publishes it another way than by rename (a lock appears by hard link: runs/folder.take_lock)."""
    fd, name = tempfile.mkstemp(dir=beside.parent, prefix=f".{beside.name.lstrip('.')}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _fsync(path: Path) -> None:
    """The file's bytes on disk before its name is published (a crash after the rename never shows it empty)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename(scratch: Path, target: Path, folder: bool, replace: bool) -> None:
    if not folder:
        (os.replace if replace else os.rename)(scratch, target)
        return
    if not (replace and target.exists()):
        os.rename(scratch, target)  # a folder already there (not empty) is refused by the rename itself
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    remove(old)
    target.rename(old)  # swapped aside, so `target` is whole at every moment but the two renames
    try:
        scratch.rename(target)
    except BaseException:
        old.rename(target)  # the earlier target back in place
        raise
    remove(old)


def remove(path: Path) -> None:
    """A hidden sibling gone, file or folder, whatever state it is in."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
