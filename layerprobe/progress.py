"""Progress reporting without a UI dependency: the library calls, the CLI renders."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int) -> None:
        """stage: what is running; done/total in the stage's own unit (tokens, variants, ...)."""


def silent(stage: str, done: int, total: int) -> None:
    """A Progress that shows nothing."""
