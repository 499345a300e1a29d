"""The layer-choosing strategies of `prune --curve` and `export --from-curve`, one record each: its name, what it
reads, how it picks k layers, and how its line is drawn. config.py takes the names and help from here, the curve
plot its colour, marker and label, and the curve command dispatches on `reads` and `picks`.

A new strategy is one Strategy here and its picking function in commands/prune/curve.py's PICKS (checked against
this table when that module loads).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    meaning: str  # for --strategies' help
    reads: str  # "angular": an angular run of the model (measured on the probe corpus when none is given);
    # "corpus": the probe corpus, scored as it picks; "": nothing but the layer count
    label: str  # the curve plot's legend
    colour: str
    marker: str


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("angular", "the best block of k consecutive layers by d(l, k) (Gromov et al.)", "angular",
             "angular (best block of n)", "#c0392b", "o"),
    Strategy("bi", "the k layers of smallest Block Influence (ShortGPT)", "angular", "Block Influence",
             "#2e86c1", "s"),
    Strategy("greedy", "SLEB-style, one layer at a time by --greedy-metric on the probe corpus, never the first or last remaining block unless --greedy-ends allow", "corpus",
             "greedy", "#27ae60", "^"),
    Strategy("last", "the last k layers", "", "last n layers", "#7f8c8d", "v"),
)}
NAMES = tuple(STRATEGIES)
