"""Few-shot prefix reuse for the shared pass (evaluation/shared_lm.py): a long token prefix that many
loglikelihood requests share (a task's description and few-shot examples) runs through each model once.

The prefix of a group is the longest common prefix of the token ids lm-eval feeds the model for each request
(`(context + continuation)[-(max_length + 1):][:-1]`, HFLM's own input), cut so every scored position lies after
it: the split is never made in text, so a tokenizer that merges across the few-shot boundary changes no token.
Per group: the unpruned model runs the prefix once, keeping every block's input and its keys and values; each
variant (layers p..p+n-1 removed) restarts from the prefix's stored input of block p and runs blocks p+n..L-1
over the prefix, keeping their keys and values (the blocks before p are the unpruned model's). Each batch of the
group's rows then runs only its own tokens: the unpruned model against the prefix cache, keeping every block's
input, and each variant restarts from block p's stored input against its own prefix cache. A model whose cache
cannot be split exactly (encoders, sliding-window or hybrid attention, custom code) is scored as before, and
the run's summary says why (`prefix_cache`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from layerprobe.evaluation.taskfree import replay_variant, replayable
from layerprobe.evaluation.variants import Variant
from layerprobe.hooks import BlockCall, BlockCapture
from layerprobe.models.layers import is_encoder, text_config
from layerprobe.models.surgery import tail_only

if TYPE_CHECKING:
    import torch  # imported where tensors are made: the grouping of token ids (prefix_groups, fed) loads no torch

MIN_PREFIX = 32  # tokens: a shorter common prefix is not worth a cache of its own


class Unsupported(Exception):
    """The model's cache cannot be split exactly: the reason, for the summary."""


def support(model: Any) -> str | None:
    """Why prefix reuse cannot serve this model (None: it can)."""
    config = text_config(model)
    if is_encoder(model) or getattr(model.config, "is_encoder_decoder", False):
        return "an encoder has no causal key/value cache"
    module = type(model).__module__
    if not module.startswith("transformers."):
        return f"custom modeling code ({module}): its cache is not known to split exactly"
    kinds = set(getattr(config, "layer_types", None) or ())
    if kinds - {"full_attention"}:
        return f"sliding-window or hybrid attention ({', '.join(sorted(kinds))}): its cache is not split exactly"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) and not kinds:
        return "sliding-window attention: its cache is not split exactly"
    return None


def fed(context: list[int], continuation: list[int], max_length: int) -> list[int]:
    """The tokens HFLM feeds the model for one request: left-truncated to max_length + 1, the last one dropped."""
    return (context + continuation)[-(max_length + 1):][:-1]


def common_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token id sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_groups(inputs: list[list[int]], first_scored: list[int],
                  min_prefix: int = MIN_PREFIX) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """([(prefix length, row indices)], loose row indices): rows whose fed tokens share at least min_prefix
    leading tokens, each group's prefix ending at or before its first scored position (first_scored[i]). Groups
    are runs of the lexicographic order split where neighbours share fewer tokens, so a group does not depend on
    which other rows are scored (a resumed pass forms the same groups). Indices keep their given order."""
    order = sorted(range(len(inputs)), key=lambda i: inputs[i])
    runs: list[tuple[list[int], int]] = []
    for i, j in zip([None, *order], order):
        shared = common_length(inputs[i], inputs[j]) if i is not None else 0
        if i is not None and shared >= min_prefix:
            members, length = runs[-1]
            runs[-1] = ([*members, j], min(length, shared))
        else:
            runs.append(([j], len(inputs[j])))
    groups, loose = [], []
    for members, length in runs:
        length = min(length, *(first_scored[i] for i in members))
        if len(members) > 1 and length >= min_prefix:
            groups.append((length, sorted(members)))
        else:
            loose += members
    return groups, sorted(loose)


def cache_key(calls: list[BlockCall]) -> int | str:
    """Where every block receives the key/value cache: a keyword, or a position among the arguments after the
    hidden state (GPT-2 passes it second)."""
    from layerprobe.internals import Cache

    keys = {k for call in calls for k, v in call.kwargs.items() if isinstance(v, Cache)}
    keys |= {i for call in calls for i, v in enumerate(call.args) if isinstance(v, Cache)}
    if len(keys) != 1:
        raise Unsupported("the blocks do not receive a key/value cache in one place")
    return keys.pop()


def layer_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Per layer index, (keys, values) of shape (batch, heads, tokens, head dim); None where a layer holds none."""
    from layerprobe.internals import DynamicLayer

    kv: list = []
    if cache is None or not isinstance(getattr(cache, "layers", None), list):
        raise Unsupported(f"the model returned no layered key/value cache ({type(cache).__name__})")
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:  # sliding-window or quantized layers keep a cut or altered history
            raise Unsupported(f"the model's cache holds {type(layer).__name__} layers, which are not split exactly")
        kv.append((layer.keys, layer.values) if layer.is_initialized else None)
    return kv


def filled(kv: list, batch: int) -> Any:
    """A new DynamicCache holding `kv` (one sequence) for each of `batch` rows, as broadcast views: the first
    update of each layer (the batch's own keys and values) makes its only copy."""
    from layerprobe.internals import DynamicCache

    cache = DynamicCache()
    for index, pair in enumerate(kv):
        if pair is not None:
            keys, values = (t.expand(batch, -1, -1, -1) for t in pair)
            cache.update(keys[:, :, :0], values[:, :, :0], index)  # an empty layer of the right kind
            cache.layers[index].keys, cache.layers[index].values = keys, values
    return cache


def with_cache(calls: list[BlockCall], key: int | str, cache: Any) -> list[BlockCall]:
    """The recorded calls with another cache in place of the one they received (at cache_key's place)."""
    if isinstance(key, int):
        return [BlockCall((*c.args[:key], cache, *c.args[key + 1:]), c.kwargs, c.hidden_in_kwargs) for c in calls]
    return [BlockCall(c.args, {**c.kwargs, key: cache}, c.hidden_in_kwargs) for c in calls]


def kv_bytes(kv: list) -> int:
    return sum(t.numel() * t.element_size() for pair in kv if pair is not None for t in pair)


def blocks_run(variant: Variant | None, layers: int, part: str, replayed: bool = True) -> int:
    """Blocks a replay of the variant runs (from its first removed block on); None: the whole unpruned model."""
    if variant is None:
        return layers
    skipped = len(variant.removed) if part == "block" else 0
    return (layers - variant.start if replayed else layers) - skipped


class PrefixGroup:
    """One shared prefix: its keys and values for the unpruned model and for every variant."""

    def __init__(self, lm: Any, tokens: list[int]) -> None:
        import torch

        model, stack, part = lm.model, lm.stack, lm.part
        ids = torch.tensor([tokens], dtype=torch.long, device=lm.device)
        extra = {"logits_to_keep": 1} if "logits_to_keep" in _parameters(model) else {}
        with BlockCapture(stack, keep_calls=True) as capture:
            output = model(ids, use_cache=True, **extra)
            states, calls = list(capture.states), list(capture.calls)
        self.key = cache_key(calls)
        if replayable(calls, lm.variants, part) != list(lm.variants):
            raise Unsupported("a removed block computes what later blocks receive")
        self.base = layer_kv(getattr(output, "cache", None) or getattr(output, "past_key_values", None))
        del output
        self.variants: dict[str, list] = {}
        self.block_tokens = len(tokens) * len(stack)
        from layerprobe.internals import DynamicCache

        for variant in lm.variants:  # the prefix of the model without the variant's layers, from its first one on
            cache = DynamicCache()
            replay_variant(model, stack, with_cache(calls, self.key, cache), states, variant, part)
            self.variants[variant.label] = layer_kv(cache)
            self.block_tokens += len(tokens) * blocks_run(variant, len(stack), part)
        self.length = len(tokens)

    def held_bytes(self) -> int:
        return kv_bytes(self.base) + sum(kv_bytes(kv) for kv in self.variants.values())


def _parameters(model: Any) -> Any:
    import inspect

    return inspect.signature(model.forward).parameters


def cache_argument(model: Any) -> str:
    """The model's keyword for a key/value cache: `cache` from transformers 5.24 on, `past_key_values` before."""
    return "cache" if "cache" in _parameters(model) else "past_key_values"


def group_batch(lm: Any, group: PrefixGroup, width: int, activations: int, budget: int) -> int:
    """Rows per batch of a group: the user's batch size, or fewer so the stored block inputs and logits of a row
    (`activations`) and the caches (the group's, one unpruned and one variant copy per row) fit `budget`; 0: not
    even one row fits."""
    asked = lm.batch_size if lm.batch_size != "auto" else 64
    per_row = activations + 2 * kv_bytes(group.base) * (group.length + width) \
        // max(1, group.length)
    return max(0, min(asked, (budget - group.held_bytes()) // per_row))


def score_group(lm: Any, group: PrefixGroup, chunk: list, scored: Callable[[int], None]) -> dict:
    """label -> log-probabilities (positions, vocab) at the scored positions of the chunk's rows (the order of
    shared_lm's batches); None = unpruned. Each row runs only its tokens after the prefix."""
    import torch
    import torch.nn.functional as F

    from layerprobe.internals import pad_and_concat

    with torch.no_grad():
        model, stack, p = lm.model, lm.stack, group.length
        inputs = [fed(ctx, cont, lm.max_length) for _, ctx, cont in chunk]
        lengths = [len(t) - p for t in inputs]  # before padding: pad_and_concat replaces the list's tensors
        rest = [torch.tensor(t[p:], dtype=torch.long, device=lm.device) for t in inputs]
        batched = pad_and_concat(max(lengths), rest, padding_side="right")  # (batch, width)
        spans = [(i * batched.shape[1] + n - len(c), len(c)) for i, (n, (_, _, c)) in enumerate(zip(lengths, chunk))]
        index = torch.cat([torch.arange(s, s + k) for s, k in spans]).to(lm.device)
        cache = filled(group.base, len(chunk))
        with BlockCapture(stack, keep_calls=True) as capture:
            logits = model(batched, **{cache_argument(model): cache}, use_cache=True).logits  # (batch, width, vocab)
            states, calls = list(capture.states), list(capture.calls)
        out = {None: F.log_softmax(logits.reshape(-1, logits.shape[-1]).index_select(0, index), dim=-1,
                                   dtype=lm.softmax_dtype)}
        del logits
        scored(1)
        tokens = sum(lengths)
        lm.block_tokens += tokens * len(stack)

        def hidden_of(variant: Variant) -> torch.Tensor:
            own = filled(group.variants[variant.label], len(chunk))
            lm.block_tokens += tokens * blocks_run(variant, len(stack), lm.part)
            return replay_variant(model, stack, with_cache(calls, group.key, own), states, variant, lm.part)

        tail_logprobs(lm, capture, list(lm.variants), hidden_of, index, out, scored)
        return out


def chunks(rows: list, size: int) -> Iterator[list]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def tail_logprobs(lm: Any, capture: BlockCapture, variants: list[Variant], hidden_of: Callable, index: torch.Tensor,
                  out: dict, scored: Callable[[int], None]) -> None:
    """out[label] = log-probabilities at the scored positions of each variant, from hidden_of(variant) (the last
    block's output) through the model's own tail (final norm, head)."""
    import torch
    import torch.nn.functional as F

    dummy = torch.zeros(index.numel(), 1, dtype=torch.long, device=lm.device)
    with torch.no_grad(), tail_only(lm.model, lm.stack) as replay:
        replay.like(capture)
        for variant in variants:
            hidden = hidden_of(variant)
            # (positions, 1, d): one position per row, so absolute position tables never run out
            replay.value = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index).unsqueeze(1)
            tail = lm.model(dummy).logits[:, 0]  # (positions, vocab): final norm and head, positions only
            out[variant.label] = F.log_softmax(tail, dim=-1, dtype=lm.softmax_dtype)
            scored(len(out))
        replay.value = None
