"""The variants of a pruning sweep: which consecutive layers each one removes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerprobe.errors import ConfigError
from layerprobe.config import PARTS  # declared once, with the settings that take it




@dataclass(frozen=True)
class Variant:
    """Remove layers start .. start+block-1, or any set of layers (`ids`, removal curves)."""

    start: int
    block: int = 1
    ids: tuple[int, ...] | None = None  # sorted layer ids; None: the consecutive block from start

    @classmethod
    def of(cls, ids: list[int] | tuple[int, ...]) -> Variant:
        """The variant removing exactly these layers (a consecutive run is an ordinary block)."""
        chosen = tuple(sorted(set(ids)))
        if chosen == tuple(range(chosen[0], chosen[0] + len(chosen))):
            return cls(chosen[0], len(chosen))
        return cls(chosen[0], len(chosen), chosen)

    @property
    def removed(self) -> list[int]:
        return list(self.ids) if self.ids is not None else list(range(self.start, self.start + self.block))

    @property
    def label(self) -> str:
        return ranges_label(self.removed)


def ranges_label(ids: list[int]) -> str:
    """[3, 7, 8, 9] -> '3,7-9': 0-based block ids, ranges inclusive at both ends."""
    parts: list[str] = []
    for index in sorted(ids):
        if parts and index == last + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
        last = index
    return ",".join(parts)


def parse_ranges(spec: str, num_layers: int, flag: str = "--layers", example: str = "0,3,8-11") -> list[int]:
    """'0,3,8-11' -> [0, 3, 8, 9, 10, 11], 0-based, ranges inclusive; each item is checked against the model before
    it is expanded (so '0-300000000' is one line, not a list of 300 million)."""
    chosen: set[int] = set()
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", part)
        if not match:
            raise ConfigError(f"Bad {flag} item '{part.strip()}': use 0-based indices and inclusive ranges like "
                              f"{example}.")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise ConfigError(f"Bad {flag} range '{part.strip()}': the end is before the start.")
        if high >= num_layers:
            raise ConfigError(f"{flag} {part.strip()} out of range: the model has layers 0..{num_layers - 1}.")
        chosen.update(range(low, high + 1))
    return sorted(chosen)


def parse_layers(spec: str | None, num_layers: int) -> list[int] | None:
    """--layers '0,3,8-11' -> [0, 3, 8, 9, 10, 11] (None: every layer)."""
    if spec is None or not spec.strip():
        return None
    return parse_ranges(spec, num_layers)


def sweep(num_layers: int, block: int = 1, layers: list[int] | None = None) -> list[Variant]:
    """One variant per start l = 0..L-block (restricted to `layers`)."""
    if block < 1:
        raise ConfigError(f"--block must be at least 1, got {block}.")
    if block >= num_layers:
        if num_layers < 2:
            raise ConfigError(f"The model has {num_layers} layer: removing it leaves no model to score; prune needs a "
                              "model of 2 or more layers.")
        raise ConfigError(f"--block {block} would remove the whole {num_layers}-layer model: use at most {num_layers - 1}.")
    starts = range(num_layers - block + 1)
    if layers is not None:
        too_late = [s for s in layers if s > num_layers - block]
        if too_late:
            raise ConfigError(
                f"--layers {', '.join(map(str, too_late))} cannot start a block of {block} in a {num_layers}-layer "
                f"model: the last start is {num_layers - block}."
            )
        starts = layers
    return [Variant(s, block) for s in starts]


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """'2/4' -> (2, 4): the 2nd of 4 slices, 1-based (SLURM arrays starting at 0: --shard $((ID+1))/N)."""
    if spec is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if not match:
        raise ConfigError(f"Bad --shard '{spec}': use K/N, e.g. 2/4 for the second of four slices.")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ConfigError(f"Bad --shard '{spec}': K must lie within 1..N and N be at least 1, e.g. 1/{max(count, 2)}.")
    return index, count


def shard_suffix(spec: str | None) -> str:
    """'2/4' -> '-shard-2-of-4', the folder-name suffix of a shard run ('' without --shard)."""
    shard = parse_shard(spec)
    return f"-shard-{shard[0]}-of-{shard[1]}" if shard else ""


def shard_of(variants: list[Variant], index: int, count: int) -> list[Variant]:
    """The index-th of count disjoint slices, every count-th variant: early and late layers mix in each shard,
    so shards cost about the same even when restarting late blocks is cheap."""
    if count > len(variants):
        raise ConfigError(
            f"--shard {index}/{count}: the sweep has only {len(variants)} variants, so some shards would be empty: "
            f"use at most N={len(variants)}."
        )
    return variants[index - 1 :: count]
