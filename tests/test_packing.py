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


def test_the_stream_is_each_document_tokenized_alone_across_the_growing_chunks(tokenizer):
    """Documents go to the tokenizer 1, 2, 4, ... 64 at a time (a short run tokenizes only what it reads): the ids
    are those of each document tokenized on its own, separator after each, over the built-in corpus's 79 documents
    twice (chunks of 1 to 32 documents, then two of 64 and the rest), and a 96-token run asks for the first chunks
    only."""
    from layerprobe.data.corpora import open_corpus
    from layerprobe.data.packing import token_stream

    texts = list(open_corpus("builtin").texts()) * 2
    assert len(texts) > 63 + 64 + 1
    want = []
    for doc in texts:
        want += tokenizer(doc, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert list(token_stream(texts, tokenizer)) == want
    read = []

    def counted():
        for doc in texts:
            read.append(doc)
            yield doc

    list(batches(counted(), tokenizer, seq_len=24, batch_size=2, total_tokens=96))
    assert len(read) < 8
