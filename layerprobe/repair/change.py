"""What a repair changed on the held-out text, with paired intervals over its sequences: each held-out sequence is
scored before (the shortened model, unrepaired) and after, so the change of ppl and of kl (the expanded percentile
interval of a paired bootstrap over sequences, p the paired t test of mean NLL and of kl: metrics/paired.py) is the
contrast `prune --task ppl|kl` computes for a removal. Below MIN_DOCUMENTS sequences the intervals are kept and
nothing is tested."""

from __future__ import annotations

import math

from layerprobe.metrics.decisions import MIN_DOCUMENTS
from layerprobe.metrics.paired import Interval, contrast

METRICS = ("ppl", "kl")


def _usable(rows: list) -> list:
    """Per-sequence [sum, positions] with a position scored (a sequence of one token scores nothing)."""
    return [(float(total), int(count)) for total, count in rows if count]


def change_intervals(before: dict, after: dict) -> dict[str, Interval]:
    """metric -> the paired interval of score(after) - score(before) over the held-out sequences, from each
    condition's per-sequence [sum, positions] (repair/loop.py heldout_scores' `sequences`); missing where either has
    no records or they cover other sequences."""
    from layerprobe.evaluation.records import statistic

    out = {}
    for metric in METRICS:
        a, b = _usable(before.get(metric) or []), _usable(after.get(metric) or [])
        if not a or len(a) != len(b) or [n for _, n in a] != [n for _, n in b]:
            out[metric] = Interval.missing()
            continue
        stat = statistic(metric)[1]
        tokens = [n for _, n in a]
        out[metric] = contrast(stat, [0] * len(a), [[t for t, _ in a], [t for t, _ in b]], [-1.0, 1.0],
                               [tokens, tokens])
    return out


def sequences(rows: dict) -> int:
    """How many held-out sequences were scored (those with a position)."""
    return len(_usable(rows.get("kl") or rows.get("ppl") or []))


def change_record(intervals: dict[str, Interval], count: int) -> dict:
    """summary.json's heldout_change: per metric the change (after - before), its paired standard error, 95% interval
    and p-value (p null below MIN_DOCUMENTS sequences: too few documents to test), the sequences, and `tested`."""
    tested = count >= MIN_DOCUMENTS

    def number(x: float) -> float | None:
        return x if isinstance(x, float) and math.isfinite(x) else None

    record: dict = {"sequences": count, "tested": tested}
    for metric, i in intervals.items():
        record[metric] = {"change": number(i.delta), "stderr": number(i.stderr), "lo": number(i.lo),
                          "hi": number(i.hi), "p": number(i.p) if tested else None}
    return record


def change_columns(intervals: dict[str, Interval] | None) -> dict:
    """heal.csv's interval columns of one scored step (NaN where none)."""
    nan = float("nan")
    columns = {}
    for metric in METRICS:
        i = (intervals or {}).get(metric)
        columns[f"{metric}_change_lo"] = i.lo if i is not None else nan
        columns[f"{metric}_change_hi"] = i.hi if i is not None else nan
    return columns
