"""The task-free metrics of `prune` (ppl, kl, drift), each one record registered in METRICS: the head it needs, its
meaning, how a batch is summed (over positions, in float64) and the sums finished, its tolerance rule, what it reads
of the unpruned output once per batch, and which sweeps take it. Sweeps, curves, outputs and findings read them
here; torch is imported only by the batch sums, so reports stay light. A new metric is one register_metric(...)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from layerprobe.registry import Names, Registry


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


def _kl_reference(output: Any) -> dict:
    """What every variant's kl reads of the unpruned output, computed once per batch: log p and p (a 49,152-word
    head would redo both per variant)."""
    import torch

    log_p = torch.log_softmax(output.float(), dim=-1)
    return {"log_p": log_p, "p": log_p.exp()}


def _ppl_edge(baseline: float, keep: float) -> float:
    return baseline / keep  # ppl <= baseline / keep


def _kl_edge(baseline: float, keep: float) -> float:
    return -math.log(keep)  # kl <= ln(1 / keep): the same ppl ratio, as a log


def _drift_edge(baseline: float, keep: float) -> float:
    return 1 - keep  # drift (1 - cos) <= 1 - keep


TASK, RESCORING = "task", "rescoring"  # the sweeps a Metric may name in `accepted_by`


@dataclass(frozen=True)
class Metric:
    """A task-free metric, whole: what it needs, what it means, how a batch is summed and the sums finished, what
    "within tolerance" is for it, and which sweeps take it. Sweeps, curves, outputs and findings read it from here
    (METRICS), and none of them branches on its name."""

    name: str
    head: str  # the model head it needs ("causal-lm": an encoder is refused, naming the metrics that need no LM head)
    meaning: str
    values: Callable[[Any, Any, Any], Any]  # (Original, pruned output, ids) -> the per-position values, float64
    # (sequences, positions)
    edge_rule: Callable[[float, float], float]  # (baseline, keep) -> the worst score within --keep
    reference: Callable[[Any], dict] | None = None  # (the unpruned output) -> what `values` reads of it besides the
    # output, computed once per batch (kl: log p and p), as the Original's attributes
    exp: bool = False  # the finished value is exp(mean) (perplexity), else the mean
    zero_baseline: bool = False  # the unpruned model scores 0 by definition: there is no baseline to state
    bounds: tuple[float, float] = (0.0, math.inf)  # the values a score can take (ppl >= 1, 0 <= drift <= 2): no
    # interval of a change leaves them (metrics/paired.py)
    higher_is_better: bool = False
    accepted_by: tuple[str, ...] = (TASK,)  # TASK: `prune --task NAME` (and a curve's score); RESCORING: a strategy
    # that scores the probe corpus as it picks minimizes it (greedy's --greedy-metric)

    def batch_sum(self, original: Any, pruned: Any, ids: Any) -> tuple[float, int, list]:
        """(sum over the batch's positions, positions, [sum, positions] of each sequence: its records)."""
        values = self.values(original, pruned, ids)
        rows = [[float(total), values.shape[1]] for total in values.sum(-1).tolist()]
        return float(values.sum()), values.numel(), rows

    def finish(self, total: float, count: int) -> float:
        mean = total / max(count, 1)
        return math.exp(mean) if self.exp else mean

    def edge(self, baseline: float, keep: float) -> float:
        """The worst score within tolerance (the record's edge_rule)."""
        return self.edge_rule(baseline, keep)

    @property
    def needs_lm(self) -> bool:
        """It reads the model's next-token distribution: an encoder cannot be scored on it."""
        return self.head == "causal-lm"


METRICS: dict[str, Metric] = Registry("task-free metric")


def register_metric(metric: Metric) -> Metric:
    """Add a task-free metric: `prune --task NAME`, a curve's score and (RESCORING) --greedy-metric take it from
    here. A name held already is refused (registry.py)."""
    return METRICS.add(metric.name, metric)


def accepted_by(sweep: str, more: tuple = ()) -> Names:
    """The metrics a sweep takes (TASK or RESCORING), then `more`, read when asked: a setting's choices, or the
    tasks an lm-eval option does not apply with."""
    return METRICS.names(lambda metric: sweep in metric.accepted_by, more)


register_metric(Metric("ppl", "causal-lm", "perplexity of the next token (lower is better)", _ppl_values, _ppl_edge,
                       exp=True, bounds=(1.0, math.inf), accepted_by=(TASK, RESCORING)))
register_metric(Metric("kl", "causal-lm", "mean KL(original || pruned) of next-token distributions", _kl_values,
                       _kl_edge, _kl_reference, zero_baseline=True, accepted_by=(TASK, RESCORING)))
register_metric(Metric("drift", "base", "mean 1 - cosine of the final hidden states against the original",
                       _drift_values, _drift_edge, zero_baseline=True, bounds=(0.0, 2.0)))


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
