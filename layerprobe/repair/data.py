"""The text a repair reads: the held-out slice it is scored on, then the training (or calibration) text after it."""

from __future__ import annotations

from typing import Any

from layerprobe.config import HealConfig
from layerprobe.data.packing import batches, empty_corpus_error, packed_sequences
from layerprobe.errors import DatasetError
from layerprobe.repair.loop import Data


def load_data(config: HealConfig, probe: Any, train_tokens: int | None = None) -> Data:
    """Held-out batches (the first --tokens), then steps x batch-size full training sequences after them (or
    `train_tokens` positions, in whole batches)."""
    import torch

    data, seq_len = config.data, probe.seq_len
    heldout = list(batches(probe.corpus.texts(), probe.tokenizer, seq_len, data.batch_size, data.tokens))
    if not heldout:
        raise empty_corpus_error(probe.corpus.spec)
    skip = sum(b.input_ids.shape[0] for b in heldout)  # a partial last sequence is skipped whole: disjoint
    per_batch = data.batch_size * seq_len
    wanted = -(-train_tokens // per_batch) * per_batch if train_tokens else config.steps * per_batch
    rows = [s for s in packed_sequences(probe.corpus.texts(), probe.tokenizer, seq_len, skip * seq_len + wanted)][skip:]
    rows = [r for r in rows if len(r) == seq_len]
    full = len(rows) // data.batch_size * data.batch_size
    if full == 0:
        raise DatasetError(f"Dataset '{probe.corpus.spec}' has no text left after the {data.tokens} held-out "
                           f"positions for one training batch of {data.batch_size} x {seq_len}: lower --tokens, "
                           "--batch-size or --seq-len, or pass a larger --dataset.")
    train = torch.tensor(rows[:full], dtype=torch.long).view(-1, data.batch_size, seq_len)
    return Data(heldout, train, skip * seq_len)
