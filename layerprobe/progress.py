"""Progress reporting without a UI dependency: the library calls, the CLI renders."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int) -> None:
        """stage: what is running; done/total in the stage's own unit (tokens, variants, ...)."""


def silent(stage: str, done: int, total: int) -> None:
    """A Progress that shows nothing."""


PHASES = "layerprobe.phase"  # the logger of phases; the CLI prints its records as plain lines (cli/common.py)


def announce(message: str) -> None:
    """Say that a phase longer than a few seconds and without a count of its own begins (a GGUF conversion, loading
    a model, lm-eval's task index, writing outputs): one line on the CLI's terminal or log, nothing in a library
    call unless the caller configures logging."""
    import logging

    logging.getLogger(PHASES).info(message)


NOTICES = "layerprobe.notice"  # the logger of things the user must see at once (the CLI prints them first, in yellow)


def notice(message: str) -> None:
    """Tell the user something that changes where or what they will find (a run written to another folder than the
    one named): a WARNING record, which Python prints on stderr even where logging is not configured (a notebook,
    a Trainer script), and the CLI shows at once."""
    import logging

    logging.getLogger(NOTICES).warning(message)
