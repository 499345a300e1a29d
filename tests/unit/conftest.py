"""The unit tier run alone (`pytest tests/unit`): the collector's thresholds raised for its process.

With torch, pandas, scipy, statsmodels and matplotlib loaded, each full collection walks millions of objects
(~0.3 s); at the default thresholds (700, 10, 10) the tier ran 13 of them, 3.8 of its 4.6 s of collecting (timed
with gc.callbacks). At (50000, 50, 50) it ran 2 (pytest's own at the end), 2.2 s in all. Garbage with cycles is
still collected, later; reference counting frees the rest at once. Left alone where the session holds the other
tiers' tests too (their models' tensors are not kept waiting for a collection)."""

from __future__ import annotations

import gc
from pathlib import Path

UNIT = Path(__file__).resolve().parent


def pytest_collection_finish(session):
    if session.items and all(Path(item.path).resolve().is_relative_to(UNIT) for item in session.items):
        gc.set_threshold(50_000, 50, 50)
