"""Corpora readers and token packing against hand-built expectations."""

from __future__ import annotations

import json

import pytest

from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches, packed_sequences, special_wrapping
from layerprobe.errors import DatasetError

DOCS = ["The quick brown fox jumps over the lazy dog.", "Layer norms differ.", "A third small document here."]


def test_readers_agree(tmp_path):
    import datasets
    import pandas as pd

    (tmp_path / "c.txt").write_text("\n\n".join(DOCS) + "\n\n\n")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(DOCS)))
    pd.DataFrame({"body": DOCS}).to_parquet(tmp_path / "c.parquet")
    datasets.Dataset.from_dict({"text": DOCS}).save_to_disk(str(tmp_path / "disk"))
    assert list(open_corpus(str(tmp_path / "c.txt")).texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "c.jsonl")).texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "c.parquet"), text_field="body").texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "disk")).texts()) == DOCS


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


def test_packing_by_hand(tokenizer):
    """BERT tokenizer: every sequence is [CLS] body [SEP]; documents joined by [SEP]; exact total."""
    prefix, suffix = special_wrapping(tokenizer)
    assert prefix == [tokenizer.cls_token_id] and suffix == [tokenizer.sep_token_id]
    stream = []
    for doc in DOCS:
        stream += tokenizer(doc, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    seqs = list(packed_sequences(DOCS, tokenizer, seq_len=8, total_tokens=21))
    assert sum(len(s) for s in seqs) == 21
    assert [len(s) for s in seqs] == [8, 8, 5]
    assert seqs[0] == [tokenizer.cls_token_id] + stream[:6] + [tokenizer.sep_token_id]
    assert seqs[1] == [tokenizer.cls_token_id] + stream[6:12] + [tokenizer.sep_token_id]
    assert seqs[2] == [tokenizer.cls_token_id] + stream[12:15] + [tokenizer.sep_token_id]


def test_packing_runs_out_and_batches_never_pad(tokenizer):
    seqs = list(packed_sequences(DOCS, tokenizer, seq_len=8, total_tokens=10_000))
    assert all(len(s) == 8 for s in seqs[:-1]) and 2 < len(seqs[-1]) <= 8
    got = list(batches(DOCS, tokenizer, seq_len=8, batch_size=2, total_tokens=10_000))
    assert sum(b.tokens for b in got) == sum(len(s) for s in seqs)
    for b in got:
        assert int(b.attention_mask.sum()) == b.tokens  # all ones: no padding


def test_packing_budget_smaller_than_specials(tokenizer):
    seqs = list(packed_sequences(DOCS, tokenizer, seq_len=8, total_tokens=9))
    assert [len(s) for s in seqs] == [8, 1]
