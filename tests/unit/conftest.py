"""The unit tier run alone (`pytest tests/unit`, or paths inside it): no torch or transformers (a test that needs them
belongs in tests/, the default tier: importing torch was 2 s of the tier's time), the collector's thresholds raised
for its process, and what lives to the end frozen (below).

With torch, pandas, scipy, statsmodels and matplotlib loaded (as the tier did until session 22 of 2026-11-28, when
torch left it; not measured again since), each full collection walked millions of objects (~0.3 s); at the default
thresholds (700, 10, 10) the tier's imports and tests ran 13 of them, 3.8 of its 4.6 s of collecting (timed with
gc.callbacks). At (50000, 50, 50) from the start, 3 (two of them pytest's own at the end), 2.2 s in all. Garbage
with cycles is still collected, later; reference counting frees the rest at once. Left alone where the session
holds the other tiers' tests too (their models' tensors are not kept waiting for a collection)."""

from __future__ import annotations

import gc
import importlib.util
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent


def _unit_tier_alone(config) -> bool:
    start = Path(config.invocation_params.dir)
    paths = [(start / str(arg).split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(path.is_relative_to(UNIT) for path in paths)


class _NoTorch:
    """Torch and transformers, found (a library asking whether they are installed hears yes) but refused when imported,
    with a RuntimeError: an ImportError would be taken by code that treats the package as optional, and pass unseen."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name.split(".")[0] in ("torch", "transformers") else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError(f"the unit tier loads no {module.__name__.split('.')[0]} (tests/unit/conftest.py): move the "
                           "test that needs it to tests/, the default tier, or import it lazily where it was reached")


def pytest_configure(config):
    if _unit_tier_alone(config):
        gc.set_threshold(50_000, 50, 50)
        if "torch" not in sys.modules:  # not loaded already: with -n, tests/conftest.py loads it in each worker
            # before this runs, and the guard stays off there
            sys.meta_path.insert(0, _NoTorch())


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
