"""Task-free pruning metrics on the probe corpus, with shared-prefix scoring.

For every batch the original forward keeps the input of every block; the variant without layers
p..p+n-1 restarts from the stored input of block p and runs only blocks p+n..L-1, then the model's
own tail (final norm, LM head) on the result. Same numbers as deleting the layers and running the
whole model, for about half the block-forwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerprobe.evaluation.metric import METRICS
from layerprobe.evaluation.variants import Variant
from layerprobe.hooks import BlockCapture, produced_inside, replay_from
from layerprobe.models.layers import BlockStack
from layerprobe.models.surgery import removed, removed_sublayers, tail_only

if TYPE_CHECKING:
    import torch  # imported where a tensor is made or tested: a reader of taskfree's names (repair.loop, the curve
    # command's checks) loads no torch


def _none(scored: int) -> None:
    """A tick that shows nothing."""


def model_output(output: Any) -> torch.Tensor:
    """Logits of an LM head, else the final hidden state."""
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output.last_hidden_state


class Original:
    """The unpruned output of one batch, with what every variant's values read of it computed once, as attributes
    (the metric's `reference`: kl's log p = log_softmax and p, which variants of a 49,152-word head would redo)."""

    def __init__(self, metric: str, output: torch.Tensor) -> None:
        self.output = output
        reference = METRICS[metric].reference
        if reference is not None:
            vars(self).update(reference(output))


def metric_sum(metric: str, original: torch.Tensor | Original, pruned: torch.Tensor,
               ids: torch.Tensor) -> tuple[float, int]:
    """(sum over positions, positions) of the metric for one batch; original/pruned: (batch, seq, V or d)."""
    return metric_rows(metric, original, pruned, ids)[:2]


def metric_rows(metric: str, original: torch.Tensor | Original, pruned: torch.Tensor,
                ids: torch.Tensor) -> tuple[float, int, list]:
    """metric_sum and each sequence's [sum, positions] (the sweep's per-sequence records)."""
    reference = original if isinstance(original, Original) else Original(metric, original)
    return METRICS[metric].batch_sum(reference, pruned, ids)


def finish(metric: str, total: float, count: int) -> float:
    return METRICS[metric].finish(total, count)


@dataclass
class Sums:
    """Running (sum, count) per variant label, plus the unpruned model's; JSON-serializable for resume."""

    baseline: list = field(default_factory=lambda: [0.0, 0])
    variants: dict = field(default_factory=dict)
    batches: int = 0
    sequences: dict = field(default_factory=dict)  # label ('' the unpruned model) -> [[sum, positions] per sequence]

    def add(self, key: str | None, value: tuple) -> None:
        """value: (sum, positions), or metric_rows' (sum, positions, per-sequence rows)."""
        slot = self.baseline if key is None else self.variants.setdefault(key, [0.0, 0])
        slot[0] += value[0]
        slot[1] += value[1]
        if len(value) > 2:
            self.sequences.setdefault(key or "", []).extend(value[2])


def add_baseline(metric: str, original: torch.Tensor, ids: torch.Tensor, sums: Sums) -> None:
    """The unpruned model's own score (perplexity); a metric of the model against itself (kl, drift: zero_baseline)
    is 0 by definition. A non-finite output of the unpruned model makes its sum NaN, so the caller names the model,
    not a variant."""
    if not METRICS[metric].zero_baseline:
        sums.add(None, metric_rows(metric, original, original, ids))
    elif not bool(original.isfinite().all()):
        sums.add(None, (float("nan"), 0))


def replay_variant(model: Any, stack: BlockStack, calls: list, states: list, variant: Variant,
                   part: str = "block") -> torch.Tensor:
    """The last block's output of the model without the variant's layers (or without their attention or MLP
    sub-layers), restarted from the stored input of its first removed block: states[l] is the same with or without
    the variant up to there. The blocks are run with the arguments their recorded calls had."""
    blocks = list(stack.blocks)
    if part == "block":
        return replay_from(blocks, calls, states[variant.start], variant.start, skip=set(variant.removed))
    with removed_sublayers(model, variant.removed, part, stack):
        return replay_from(blocks, calls, states[variant.start], variant.start)


def replayable(calls: list, variants: list[Variant], part: str = "block") -> list[Variant]:
    """The variants a replay of the recorded calls scores right: all but those removing a block whose outputs feed
    later blocks' arguments (hooks.produced_inside), which the caller scores by a full forward."""
    producers = produced_inside(calls) if part == "block" else frozenset()
    return [v for v in variants if not producers & set(v.removed)]


def score_batch_shared(model: Any, stack: BlockStack, metric: str, variants: list[Variant],
                       ids: torch.Tensor, mask: torch.Tensor, sums: Sums, part: str = "block",
                       tick: Callable[[int], None] = _none) -> None:
    """One original forward; each variant restarts from the stored input of its first removed block (but those
    removing a block whose outputs feed later blocks' arguments: a full forward, hooks.produced_inside).
    tick(n): n variants of this batch are scored (progress inside a batch)."""
    with BlockCapture(stack, keep_calls=True) as capture:
        original = model_output(model(input_ids=ids, attention_mask=mask))
        states, calls = list(capture.states), list(capture.calls)
    add_baseline(metric, original, ids, sums)
    original = Original(metric, original)
    replayed = replayable(calls, variants, part)
    scored = 0
    with tail_only(model, stack) as replay:
        replay.like(capture)
        for variant in replayed:
            replay.value = replay_variant(model, stack, calls, states, variant, part)  # (batch, seq, d)
            pruned = model_output(model(input_ids=ids, attention_mask=mask))
            sums.add(variant.label, metric_rows(metric, original, pruned, ids))
            scored += 1
            tick(scored)
        replay.value = None
    for variant in variants:
        if variant not in replayed:
            with removed(model, variant.removed, part, stack):
                pruned = model_output(model(input_ids=ids, attention_mask=mask))
            sums.add(variant.label, metric_rows(metric, original, pruned, ids))
            scored += 1
            tick(scored)


def score_batch_naive(model: Any, stack: BlockStack, metric: str, variants: list[Variant],
                      ids: torch.Tensor, mask: torch.Tensor, sums: Sums, part: str = "block",
                      tick: Callable[[int], None] = _none) -> None:
    """The plain way: delete the layers, run the whole model, restore; per variant."""
    original = model_output(model(input_ids=ids, attention_mask=mask))
    add_baseline(metric, original, ids, sums)
    original = Original(metric, original)
    for scored, variant in enumerate(variants, 1):
        with removed(model, variant.removed, part, stack):
            pruned = model_output(model(input_ids=ids, attention_mask=mask))
        sums.add(variant.label, metric_rows(metric, original, pruned, ids))
        tick(scored)
