"""measure_gain: what a shortened model saves where users feel it, original vs shortened, in one run on one device.

Parameters and weight bytes are counted; prefill time per token (one forward over the timing batch), decode tokens/s
(`generate` of a stated number of new tokens, greedy, with the KV cache, timed from the first new token to the last
by the clock inside generate, so the prompt's forward is not in it) and KV-cache bytes per
token (the tensors a forward with use_cache=True leaves in the cache, over the positions it read) are measured.
The two models are timed alternately, repeat by repeat (who goes first alternates too), and the medians are
reported: timing all original repeats and then all shortened ones lets the machine's drift (caches, clocks, other
processes) pass for a difference between the models. Each ratio is shortened over original.

`--part attn|mlp` keeps every weight (the sub-layer's output projection is zeroed, not removed): the ratios say in
numbers that nothing is gained (about 1.0).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from layerprobe.errors import first_line
from layerprobe.models.surgery import removed


def model_inputs(model: Any, ids: Any) -> dict:
    """Text in: an encoder-decoder's decoder reads the same tokens (as layerprobe measured it)."""
    return {"input_ids": ids, **({"decoder_input_ids": ids} if model.config.is_encoder_decoder else {})}


def _decodes(model: Any) -> bool:
    """generate with a KV cache applies: a decoder-only language model."""
    can = getattr(model, "can_generate", None)
    return bool(can and can()) and not model.config.is_encoder_decoder


def cache_bytes(cache: Any) -> int:
    """Bytes of every tensor a forward left in its KV cache (transformers' Cache objects, or legacy tuples)."""
    import torch

    if cache is None:
        return 0
    if torch.is_tensor(cache):
        return cache.numel() * cache.element_size()
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers' DynamicCache: one record per layer with keys and values
        return sum(cache_bytes(getattr(layer, name, None)) for layer in layers for name in ("keys", "values"))
    if isinstance(cache, (tuple, list)):
        return sum(cache_bytes(item) for item in cache)
    return 0


def kv_cache_bytes_per_token(model: Any, ids: Any) -> float | None:
    """KV-cache bytes per token position of a forward with use_cache=True on `ids` (None: the model keeps none)."""
    import torch

    if not _decodes(model):
        return None
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
    total = cache_bytes(getattr(out, "past_key_values", None))
    return total / ids.numel() if total else None


def _time(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _one_repeat(model: Any, batch: Any, prompt: Any, new_tokens: int) -> tuple[float, float | None]:
    """(prefill seconds on `batch`, seconds of the new_tokens - 1 decode steps of a `generate` after `prompt`, or
    None). The decode is timed inside generate: a logits processor stamps the clock after each step's forward, so
    the prompt's own forward (the first stamp) and generate's set-up are outside the interval, not subtracted."""
    from transformers import LogitsProcessorList

    prefill = _time(lambda: model(**model_inputs(model, batch)))
    if prompt is None:
        return prefill, None
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    clock = _StepClock()
    model.generate(input_ids=prompt, attention_mask=prompt.new_ones(prompt.shape), max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=pad,
                   logits_processor=LogitsProcessorList([clock]))
    if len(clock.stamps) != new_tokens:  # generate stopped early or took another path: no decode figure
        return prefill, None
    return prefill, max(clock.stamps[-1] - clock.stamps[0], 1e-9)


class _StepClock:
    """A logits processor that changes nothing: generate calls it once per new token, right after that token's
    forward (the first call follows the prompt's forward)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if scores.is_cuda:  # the step's kernels are queued, not done: wait for them (each step waits anyway)
            import torch

            torch.cuda.synchronize(scores.device)
        self.stamps.append(time.perf_counter())
        return scores


def _alternated(model: Any, stack: Any, ids: list[int], part: str, batch: Any, prompt: Any, repeats: int,
                new_tokens: int) -> dict[str, list]:
    """Per model ('original', 'exported'), the (prefill, decode) seconds of each repeat, timed alternately."""
    import torch

    times: dict[str, list] = {"original": [], "exported": []}

    def run(name: str) -> tuple[float, float | None]:
        if name == "original":
            return _one_repeat(model, batch, prompt, new_tokens)
        with removed(model, ids, part, stack):
            return _one_repeat(model, batch, prompt, new_tokens)

    with torch.inference_mode():
        for name in times:  # warm-up: first calls allocate
            run(name)
        for repeat in range(repeats):
            order = ("original", "exported") if repeat % 2 == 0 else ("exported", "original")
            for name in order:
                times[name].append(run(name))
    return times


def measure_gain(model: Any, stack: Any, ids: list[int], batch: Any, repeats: int, part: str = "block",
                 new_tokens: int = 16, longest: int | None = None) -> dict:
    """Parameters, weight bytes, prefill time per token, decode tokens/s and KV-cache bytes per token, original vs
    shortened (the blocks `ids` removed, or their `part` sub-layers), medians of alternated repeats. The decode's
    prompt is the batch, cut so that prompt and new tokens fit in `longest` positions; its tokens/s counts the
    new_tokens - 1 tokens after the first (which the prompt's forward gives), so it needs new_tokens >= 2."""
    room = batch.shape[1] if longest is None else min(batch.shape[1], longest - new_tokens)
    prompt = batch[:, :room] if _decodes(model) and new_tokens > 1 and room > 0 else None
    params = list(model.parameters())
    count, size = sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)
    gone = [p for i in ids for p in stack.blocks[i].parameters()] if part == "block" else []
    kept_count, kept_size = count - sum(p.numel() for p in gone), size - sum(p.numel() * p.element_size() for p in gone)
    unmeasured = None
    try:
        kv_original = kv_cache_bytes_per_token(model, batch)
        with removed(model, ids, part, stack):
            kv_exported = kv_cache_bytes_per_token(model, batch)
    except Exception as exc:  # noqa: BLE001 - a cache the model keeps its own way (Jamba's with a block gone)
        kv_original = kv_exported = prompt = None  # no cache, no decode timing: said in the record, not guessed
        unmeasured = f"the KV cache and decoding were not measured: {first_line(exc)}"
    times = _alternated(model, stack, ids, part, batch, prompt, repeats, new_tokens)
    if prompt is not None and not any(t[1] for v in times.values() for t in v):
        unmeasured = unmeasured or ("decoding was not measured: generate did not decode the asked tokens one step "
                                    "at a time (assisted decoding, stop strings, or its own generate)")
    prefill = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    steps = batch.shape[0] * (new_tokens - 1)  # tokens the timed decode steps produce (the first: the prefill's)
    decoded = {k: [steps / t[1] for t in v if t[1] is not None] for k, v in times.items()}
    speed = {k: statistics.median(v) if v else None for k, v in decoded.items()}
    tokens = batch.numel()
    return {"parameters_original": count, "parameters_exported": kept_count, "parameter_ratio": kept_count / count,
            "weights_bytes_original": size, "weights_bytes_exported": kept_size, "weights_ratio": kept_size / size,
            "seconds_per_token_original": prefill["original"] / tokens,
            "seconds_per_token_exported": prefill["exported"] / tokens,
            "time_ratio": prefill["exported"] / prefill["original"],
            "decode_tokens_per_second_original": speed["original"],
            "decode_tokens_per_second_exported": speed["exported"],
            "decode_speed_ratio": speed["exported"] / speed["original"] if speed["original"] else None,
            "decode_batch": batch.shape[0] if speed["original"] else None,
            "decode_prompt_tokens": prompt.shape[1] if speed["original"] else None,
            "decode_new_tokens": new_tokens if speed["original"] else None,
            "kv_cache_bytes_per_token_original": kv_original, "kv_cache_bytes_per_token_exported": kv_exported,
            "kv_cache_ratio": kv_exported / kv_original if kv_original and kv_exported is not None else None,
            "part": part, "timing": "original and shortened alternately, repeat by repeat; medians",
            "not_measured": unmeasured,
            "timing_batch": list(batch.shape), "timing_repeats": repeats}
