"""One way to own hooks: whatever a context manager registers on a model is removed when it exits, and a
registration that fails part-way removes the hooks already made before the error goes on (TransformerLens'
`hooks()`: registered inside the `try` whose `finally` removes them).

A class that hooks a model subclasses HookOwner and says what it registers (`attach`) and what it forgets after
(`detach`); a function that hooks a model for one block of code uses `owned_hooks()`.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any


class Hooks:
    """The handles of the hooks one owner registered, each added as it is made."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def add(self, handle: Any) -> Any:
        self.handles.append(handle)
        return handle

    def remove(self) -> None:
        """Take every hook off, last first; a second call finds none."""
        while self.handles:
            self.handles.pop().remove()


class HookOwner(abc.ABC):
    """A context manager owning the hooks `attach` registers: removed on exit, or at once when `attach` fails
    part-way; `detach` then drops what the hooks gathered."""

    @abc.abstractmethod
    def attach(self, hooks: Hooks) -> None:
        """Register this owner's hooks, each through `hooks.add` as it is made."""

    def detach(self) -> None:
        """What to forget once the hooks are off (the captured tensors)."""

    def __enter__(self) -> Any:
        self._hooks = Hooks()
        try:
            self.attach(self._hooks)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        hooks = getattr(self, "_hooks", None)
        if hooks is not None:
            hooks.remove()
        self.detach()


@contextlib.contextmanager
def owned_hooks() -> Iterator[Hooks]:
    """Hooks for one block of code: every one added is removed when it ends, however it ends."""
    hooks = Hooks()
    try:
        yield hooks
    finally:
        hooks.remove()
