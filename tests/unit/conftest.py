"""The unit tier run alone (`pytest tests/unit`, or paths inside it): the collector's thresholds raised for its
process, and what lives to the end frozen (below).

With torch, pandas, scipy, statsmodels and matplotlib loaded, each full collection walks millions of objects
(~0.3 s); at the default thresholds (700, 10, 10) the tier's imports and tests ran 13 of them, 3.8 of its 4.6 s of
collecting (timed with gc.callbacks). At (50000, 50, 50) from the start, 3 (two of them pytest's own at the end),
2.2 s in all. Garbage with cycles is still collected, later; reference counting frees the rest at once. Left alone
where the session holds the other tiers' tests too (their models' tensors are not kept waiting for a collection)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent


def _unit_tier_alone(config) -> bool:
    start = Path(config.invocation_params.dir)
    paths = [(start / str(arg).split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(path.is_relative_to(UNIT) for path in paths)


def pytest_configure(config):
    if _unit_tier_alone(config):
        gc.set_threshold(50_000, 50, 50)


def pytest_collection_finish(session):
    """Everything imported by now (the modules, their tables) lives to the end: frozen, so each later full collection,
    and pytest's own five at the end of the session, walks only what the tests make."""
    if _unit_tier_alone(session.config):
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """After pytest's own last collections (which report what a destructor raised): the rest frozen too, so the
    interpreter's exit walks no heap (~1 s after torch, pandas and scipy are loaded)."""
    if _unit_tier_alone(config):
        gc.freeze()
