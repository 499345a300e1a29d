"""Shallow against deep layers over training: the first and last thirds' mean d(l, 1) per measured step of a
monitor.csv (or training.csv) table, and the step from which the deep third stays below (pandas only)."""

from __future__ import annotations

from typing import Any


def thirds(table: Any) -> Any:
    """Per measured step, the mean d(l, 1) of the first and of the last third of the blocks: a DataFrame indexed
    by step with columns shallow and deep."""
    blocks = table[table["distance_next"].notna()]
    count = int(blocks["layer"].max()) + 1
    third = max(1, count // 3)
    by_step = blocks.pivot(index="step", columns="layer", values="distance_next").sort_index()
    return by_step.iloc[:, :third].mean(axis=1).to_frame("shallow").assign(deep=by_step.iloc[:, -third:].mean(axis=1))


def crossover_step(table: Any) -> int | None:
    """The first measured step from which the deep third's mean d(l, 1) stays below the shallow third's, up to the
    last step measured; None when it is not below at the last step."""
    means = thirds(table)
    below = (means["deep"] < means["shallow"]).tolist()
    if not below or not below[-1]:
        return None
    first = len(below) - 1
    while first > 0 and below[first - 1]:
        first -= 1
    return int(means.index[first])
