"""The task-free metrics of `prune` (ppl, kl, drift), each one record: the head it needs, its meaning, how a batch
is summed (over positions, in float64) and the sums finished, and its tolerance rule. Sweeps, curves, outputs
and findings read them here; torch is imported only by the batch sums, so reports stay light."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _ppl_values(original: Any, pruned: Any, ids: Any) -> Any:
    import torch

    logits = pruned[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    return nll.double().reshape(ids.shape[0], -1)


def _kl_values(original: Any, pruned: Any, ids: Any) -> Any:
    import torch

    log_q = torch.log_softmax(pruned.float(), dim=-1)
    kl = (original.p * (original.log_p - log_q)).sum(-1)  # (batch, seq); small terms, summed: no cancellation
    return kl.double()


def _drift_values(original: Any, pruned: Any, ids: Any) -> Any:
    import torch

    cos = torch.nn.functional.cosine_similarity(original.output.double(), pruned.double(), dim=-1)
    return 1.0 - cos


@dataclass(frozen=True)
class Metric:
    """A task-free metric, whole: what it needs, what it means, how a batch is summed and the sums finished, and
    what "within tolerance" is for it. Sweeps, curves, outputs and findings read it from here."""

    name: str
    head: str  # the model head it needs
    meaning: str
    values: Any  # (Original, pruned output, ids) -> the per-position values, float64 (sequences, positions)
    exp: bool = False  # the finished value is exp(mean) (perplexity), else the mean
    zero_baseline: bool = False  # the unpruned model scores 0 by definition: there is no baseline to state
    higher_is_better: bool = False

    def batch_sum(self, original: Any, pruned: Any, ids: Any) -> tuple[float, int, list]:
        """(sum over the batch's positions, positions, [sum, positions] of each sequence: its records)."""
        values = self.values(original, pruned, ids)
        rows = [[float(total), values.shape[1]] for total in values.sum(-1).tolist()]
        return float(values.sum()), values.numel(), rows

    def finish(self, total: float, count: int) -> float:
        mean = total / max(count, 1)
        return math.exp(mean) if self.exp else mean

    def edge(self, baseline: float, keep: float) -> float:
        """The worst score within tolerance: ppl <= baseline / keep; kl <= ln(1 / keep), the same ppl ratio as a
        log; drift (1 - cos) <= 1 - keep."""
        if self.name == "kl":
            return -math.log(keep)
        if self.name == "drift":
            return 1 - keep
        return baseline / keep


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("ppl", "causal-lm", "perplexity of the next token (lower is better)", _ppl_values, exp=True),
    Metric("kl", "causal-lm", "mean KL(original || pruned) of next-token distributions", _kl_values, zero_baseline=True),
    Metric("drift", "base", "mean 1 - cosine of the final hidden states against the original", _drift_values,
           zero_baseline=True),
)}


def tolerance_edge(metric: str, higher: bool, baseline: float, keep: float) -> float:
    """The worst score within tolerance: a task-free metric's own rule; an accuracy-like score keeps `keep` of the
    baseline; another lower-is-better score may grow to baseline / keep."""
    if metric in METRICS:
        return METRICS[metric].edge(baseline, keep)
    return keep * baseline if higher else baseline / keep


def within(metric: str, higher: bool, baseline: float, score: float, keep: float) -> bool:
    """Is the score within the tolerance (tolerance_edge)? A non-finite score never is."""
    if not math.isfinite(score):
        return False
    edge = tolerance_edge(metric, higher, baseline, keep)
    return score >= edge if higher else score <= edge


def has_baseline(metric: str) -> bool:
    """False for kl and drift: the unpruned model scores 0 by definition."""
    return not (metric in METRICS and METRICS[metric].zero_baseline)
