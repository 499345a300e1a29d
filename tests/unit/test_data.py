"""Corpora readers and token packing against hand-built expectations."""

from __future__ import annotations

import pytest

from layerprobe.data.corpora import open_corpus
from layerprobe.errors import DatasetError

DOCS = ["The quick brown fox jumps over the lazy dog.", "Layer norms differ.", "A third small document here."]


def test_builtin_corpus_is_english_prose():
    texts = list(open_corpus("builtin").texts())
    assert len(texts) > 50 and sum(len(t) for t in texts) > 300_000


def test_parquet_missing_column(tmp_path):
    import pandas as pd

    pd.DataFrame({"body": DOCS}).to_parquet(tmp_path / "c.parquet")
    with pytest.raises(DatasetError, match="--text-field"):
        list(open_corpus(str(tmp_path / "c.parquet")).texts())


def test_hub_dataset_offline_is_an_error_not_a_switch():
    with pytest.raises(DatasetError, match="offline"):
        open_corpus("c4")
    with pytest.raises(DatasetError, match="offline"):
        open_corpus("wikitext:wikitext-2-raw-v1:test")
