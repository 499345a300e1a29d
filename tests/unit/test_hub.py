"""Hub mistakes are named in seconds, before the hub libraries' half minute of retries (issue 39, item 5)."""

from __future__ import annotations

import socket

import pytest

from layerprobe.data.corpora import open_corpus
from layerprobe.errors import DatasetError
from layerprobe.hub import hub_problem


@pytest.fixture
def dead_hub(monkeypatch):
    """Online mode (no HF_*_OFFLINE) with the hub endpoint on a local port nothing listens on: refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    return port


@pytest.fixture
def live_hub(monkeypatch):
    """A local listener standing in for a reachable hub."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        yield


def test_offline_variable_is_the_reason(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in hub_problem()


def test_unreachable_hub_is_named(dead_hub):
    assert f"127.0.0.1" in hub_problem() and "unreachable" in hub_problem()


def test_reachable_hub_is_no_problem(live_hub):
    assert hub_problem() is None


def test_hub_dataset_with_live_hub_is_a_hub_corpus(live_hub):
    assert open_corpus("someone/corpus:en").kind == "hub"


@pytest.mark.parametrize("typo", ["bultin", "biultin", "pydocs", "Builtn"])
def test_typo_of_a_local_corpus_is_named_even_online(typo, live_hub):
    with pytest.raises(DatasetError, match="Did you mean: (builtin|pydoc)\\?"):
        open_corpus(typo)
