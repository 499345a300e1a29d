"""A transformers fast tokenizer as GGUF's tokenizer.ggml.* keys, the way llama.cpp's loader reads them.

Two tokenizer models cover the architectures export writes:
- byte-level BPE (GPT-2 style: SmolLM2, Qwen2, LLaMA 3): `gpt2`, the tokens in the byte alphabet as the HF
  vocabulary spells them and the merges as "left right" strings, ranked as HF ranks them; the pre-tokenizer
  (`tokenizer.ggml.pre`) named after the HF one where llama.cpp has its twin (gpt-2, smollm, qwen2), else 'default';
- SentencePiece (byte-fallback BPE: Gemma, LLaMA 2; or Unigram): `llama`, with one score per token. llama.cpp's
  SentencePiece tokenizer merges the pair whose result scores highest, so a BPE token's score is minus the rank of
  the merge that makes it (HF's merge order); a Unigram token keeps its own log-probability.
Token types: CONTROL for special added tokens, USER_DEFINED for other added tokens, BYTE for <0xNN>, UNKNOWN for
the unknown token, UNUSED for an embedding row no token names (a padded vocabulary), NORMAL otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from layerprobe.errors import ArchitectureError

BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
# llama.cpp's name for the pre-tokenizer split (llama-vocab.cpp), by architecture where the HF pre-tokenizer is not
# one of the two shapes _pre_tokenizer recognizes; 'default' otherwise
PRE_TOKENIZERS = {"qwen2": "qwen2"}


def _pre_tokenizer(spec: dict, architecture: str) -> str:
    """llama.cpp's pre-tokenizer for a byte-level BPE: GPT-2's regex alone is 'gpt-2'; digits split one by one
    before it (SmolLM) is 'smollm'; else by architecture."""
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [step.get("type") for step in steps]
    gpt2 = [s for s in steps if s.get("type") == "ByteLevel" and s.get("use_regex", True)]
    if kinds == ["ByteLevel"] and gpt2:
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and gpt2 and steps[0].get("individual_digits"):
        return "smollm"
    return PRE_TOKENIZERS.get(architecture, "default")


def _merges(model: dict) -> list[str]:
    """A BPE model's merges as GGUF stores them: 'left right' (tokenizers writes a list of pairs or of strings)."""
    return [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]


def _prepends_space(spec: dict) -> bool:
    """Whether the tokenizer puts '▁' before the text (SentencePiece's add_dummy_prefix)."""
    text = json.dumps([spec.get("normalizer"), spec.get("pre_tokenizer")])
    return '"Prepend"' in text or '"prepend_scheme": "always"' in text or '"prepend_scheme": "first"' in text


def _scores(kind: str, model: dict, tokens: list[str]) -> list[float]:
    """One score per token for llama.cpp's SentencePiece tokenizer (see the module doc)."""
    if kind == "Unigram":
        given = {piece: float(score) for piece, score in model["vocab"]}
        return [given.get(token, 0.0) for token in tokens]
    rank = {}
    for index, merge in enumerate(_merges(model)):
        rank.setdefault(merge.replace(" ", ""), index)
    return [-float(rank[token]) if token in rank else 0.0 for token in tokens]


def tokenizer_fields(tokenizer: Any, rows: int, architecture: str) -> dict[str, Any]:
    """The tokenizer.ggml.* (and tokenizer.chat_template) values for a model with `rows` embedding rows: GGUF key ->
    value, lists for arrays. Refuses a tokenizer llama.cpp has no model for, or one larger than the embedding."""
    from gguf import TokenType

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ArchitectureError(f"The tokenizer ({type(tokenizer).__name__}) is not a fast tokenizer, so its "
                                "vocabulary cannot be written to GGUF: save the model with its tokenizer.json.")
    spec = json.loads(backend.to_str())
    model = spec["model"]
    kind = model["type"]
    sentencepiece = kind == "Unigram" or (kind == "BPE" and bool(model.get("byte_fallback")))
    if kind not in ("BPE", "Unigram"):
        raise ArchitectureError(f"The tokenizer is a {kind} model, which llama.cpp's GGUF loader has no reading "
                                "for in a causal LM: --format gguf writes BPE and SentencePiece tokenizers; use "
                                "--format hf.")
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if by_id and max(by_id) >= rows:
        raise ArchitectureError(f"The tokenizer has token id {max(by_id)} but the model has {rows} embedding rows: "
                                "the tokenizer is not this model's; save the model with its own tokenizer.")
    added = {index: token.special for index, token in tokenizer.added_tokens_decoder.items()}
    tokens, types = [], []
    for index in range(rows):
        token = by_id.get(index)
        if token is None:  # a padded vocabulary: llama.cpp needs one token per row
            tokens.append(f"[PAD{index}]")
            types.append(TokenType.UNUSED)
            continue
        tokens.append(token)
        if index in added:
            types.append(TokenType.CONTROL if added[index] else TokenType.USER_DEFINED)
        elif sentencepiece and BYTE_TOKEN.match(token):
            types.append(TokenType.BYTE)
        elif token == tokenizer.unk_token:
            types.append(TokenType.UNKNOWN)
        else:
            types.append(TokenType.NORMAL)
    fields: dict[str, Any] = {"tokenizer.ggml.model": "llama" if sentencepiece else "gpt2",
                              "tokenizer.ggml.pre": "default" if sentencepiece else _pre_tokenizer(spec, architecture),
                              "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [int(t) for t in types]}
    if sentencepiece:
        fields["tokenizer.ggml.scores"] = _scores(kind, model, tokens)
    else:
        fields["tokenizer.ggml.merges"] = _merges(model)
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("unknown_token_id", "unk_token_id"), ("padding_token_id", "pad_token_id")):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            fields[f"tokenizer.ggml.{key}"] = value
    for key in ("add_bos_token", "add_eos_token"):
        value = getattr(tokenizer, key, None)
        if isinstance(value, bool):
            fields[f"tokenizer.ggml.{key}"] = value
    fields["tokenizer.ggml.add_space_prefix"] = _prepends_space(spec)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        fields["tokenizer.chat_template"] = template
    return fields
