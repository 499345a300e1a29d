"""Token packing against hand-built expectations, with the packaged MiniLM's tokenizer (moved from
tests/unit/test_data.py: loading a tokenizer imports transformers, which the unit tier does not)."""

from __future__ import annotations

from layerprobe.data.packing import batches, packed_sequences, special_wrapping

from .unit.test_data import DOCS


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
