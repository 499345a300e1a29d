"""Hooks that live as long as one command call: a loaded encoder-decoder's decoder-input hook is registered here
and removed when the command that loaded the model returns or fails (runs.folder.abandons_on_error), so no hook
outlives the call that made it. Library code that calls load_model itself releases them with release()."""

from __future__ import annotations

from typing import Any

_live: list[Any] = []  # handles of hooks registered for the command in progress


def register(handle: Any) -> None:
    _live.append(handle)


def mark() -> int:
    """Where the hooks of a call begin: release(mark) removes only those registered after it."""
    return len(_live)


def release(since: int = 0) -> None:
    """Remove the hooks registered since `since` (every one by default)."""
    while len(_live) > since:
        _live.pop().remove()
