"""The task-free metrics of `prune` (ppl, kl, drift), each one record: the head it needs, its meaning, how a batch
is summed (over positions, in float64) and the sums finished, and its tolerance rule. Sweeps, curves, outputs
and findings read them here; torch is imported only by the batch sums, so reports stay light."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _ppl_sum(original: Any, pruned: Any, ids: Any) -> tuple[float, int]:
    import torch

    logits = pruned[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    return float(nll.double().sum()), nll.numel()


def _kl_sum(original: Any, pruned: Any, ids: Any) -> tuple[float, int]:
    import torch

    log_q = torch.log_softmax(pruned.float(), dim=-1)
    kl = (original.p * (original.log_p - log_q)).sum(-1)  # (batch, seq); small terms, summed: no cancellation
    return float(kl.double().sum()), kl.numel()


def _drift_sum(original: Any, pruned: Any, ids: Any) -> tuple[float, int]:
    import torch

    cos = torch.nn.functional.cosine_similarity(original.output.double(), pruned.double(), dim=-1)
    return float((1.0 - cos).sum()), cos.numel()


@dataclass(frozen=True)
class Metric:
    """A task-free metric, whole: what it needs, what it means, how a batch is summed and the sums finished, and
    what "within tolerance" is for it. Sweeps, curves, outputs and findings read it from here."""

    name: str
    head: str  # the model head it needs
    meaning: str
    batch_sum: Any  # (Original, pruned output, ids) -> (sum over positions, positions)
    exp: bool = False  # the finished value is exp(mean) (perplexity), else the mean
    zero_baseline: bool = False  # the unpruned model scores 0 by definition: there is no baseline to state
    higher_is_better: bool = False

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
    Metric("ppl", "causal-lm", "perplexity of the next token (lower is better)", _ppl_sum, exp=True),
    Metric("kl", "causal-lm", "mean KL(original || pruned) of next-token distributions", _kl_sum, zero_baseline=True),
    Metric("drift", "base", "mean 1 - cosine of the final hidden states against the original", _drift_sum,
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
