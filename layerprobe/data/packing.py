"""Tokenize documents with the model's tokenizer and pack them into fixed-length sequences, no padding."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from layerprobe.errors import ConfigError, DatasetError
from layerprobe.models.layers import text_config


DOCS_PER_CALL = 64  # documents handed to the (fast) tokenizer at once, at most: the first call takes one, each
# next one twice as many, so a run of a few hundred tokens never tokenizes 64 long documents it does not read
UNBOUNDED = 1_000_000  # tokenizers report huge model_max_length when they have none


@dataclass
class Batch:
    """A batch of equal-length packed sequences (never padded; the mask is all ones)."""

    input_ids: Any  # (batch, seq) int64
    attention_mask: Any  # (batch, seq) int64

    @property
    def tokens(self) -> int:
        return int(self.input_ids.numel())


def special_wrapping(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text ([CLS] ... [SEP] for BERT, <s> for LLaMA)."""
    bare = tokenizer("layerprobe", add_special_tokens=False)["input_ids"]
    full = tokenizer("layerprobe", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return list(full[:start]), list(full[start + len(bare) :])
    return [], []


def document_separator(tokenizer: Any) -> list[int]:
    """Id placed between packed documents: EOS for decoders, SEP for encoders, else nothing."""
    for token_id in (tokenizer.eos_token_id, tokenizer.sep_token_id):
        if token_id is not None:
            return [int(token_id)]
    return []


def sequence_limit(model: Any, tokenizer: Any) -> tuple[int, str] | None:
    """(the longest sequence the model takes, which limit that is): the model's position table where its config
    has one (a tokenizer saved with another model may say less), else the tokenizer's model_max_length."""
    config = text_config(model)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and 0 < value < UNBOUNDED:
            return value, f"the model's {value} positions ({name})"
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < UNBOUNDED:
        return value, f"the tokenizer's model_max_length {value}"
    return None


def max_sequence_length(model: Any, tokenizer: Any) -> int | None:
    """The longest sequence the model takes (see sequence_limit)."""
    limit = sequence_limit(model, tokenizer)
    return limit[0] if limit else None


def check_sizes(tokens: int | None, seq_len: int, batch_size: int) -> None:
    """DataOptions' bounds (config.py): two positions at least, a next-token target needs them. tokens None: the
    command reads no --tokens."""
    for name, value, least in (("--tokens", tokens, 2), ("--seq-len", seq_len, 2), ("--batch-size", batch_size, 1)):
        if value is not None and value < least:
            raise ConfigError(f"{name} must be at least {least}, got {value}.")


def token_stream(texts: Iterable[str], tokenizer: Any) -> Iterator[int]:
    """Token ids of all documents, separated, without special wrapping."""
    separator = document_separator(tokenizer)
    chunk: list[str] = []

    def encode(docs: list[str]) -> Iterator[int]:
        for ids in tokenizer(docs, add_special_tokens=False, verbose=False)["input_ids"]:
            yield from ids
            yield from separator

    size = 1
    for text in texts:
        chunk.append(text)
        if len(chunk) == size:
            yield from encode(chunk)
            chunk, size = [], min(2 * size, DOCS_PER_CALL)
    if chunk:
        yield from encode(chunk)


def packed_sequences(texts: Iterable[str], tokenizer: Any, seq_len: int, total_tokens: int) -> Iterator[list[int]]:
    """Sequences of seq_len ids (special tokens included) totalling exactly total_tokens, if the text lasts.

    The last sequence is shorter when the budget or the corpus ends mid-sequence.
    """
    prefix, suffix = special_wrapping(tokenizer)
    body = seq_len - len(prefix) - len(suffix)
    if body <= 0:
        raise ConfigError(f"--seq-len {seq_len} leaves no room for text after the special tokens: use at least {len(prefix) + len(suffix) + 1}.")
    specials = len(prefix) + len(suffix)
    remaining = total_tokens
    current: list[int] = []
    for token in token_stream(texts, tokenizer):
        current.append(token)
        # Text tokens this sequence takes: a full body, or what the budget has left (at least one).
        if len(current) == min(body, max(1, remaining - specials)):
            sequence = (prefix + current + suffix)[:remaining]
            remaining -= len(sequence)
            yield sequence
            current = []
            if remaining == 0:
                return
    if current:
        yield (prefix + current + suffix)[:remaining]


def batches(
    texts: Iterable[str], tokenizer: Any, seq_len: int, batch_size: int, total_tokens: int
) -> Iterator[Batch]:
    """Batches of packed sequences; a shorter final sequence goes in a batch of its own (no padding)."""
    import torch

    check_sizes(total_tokens, seq_len, batch_size)
    group: list[list[int]] = []

    def emit() -> Batch:
        ids = torch.tensor(group, dtype=torch.long)
        return Batch(ids, torch.ones_like(ids))

    for sequence in packed_sequences(texts, tokenizer, seq_len, total_tokens):
        if group and len(sequence) != len(group[0]):
            yield emit()
            group = []
        group.append(sequence)
        if len(group) == batch_size:
            yield emit()
            group = []
    if group:
        yield emit()


def empty_corpus_error(spec: str) -> DatasetError:
    return DatasetError(f"Dataset '{spec}' yielded no text: check the file or pass --text-field for the text column.")
