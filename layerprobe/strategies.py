"""The layer-choosing strategies of `prune --curve` and `export --from-curve`, one record each in STRATEGIES: its
name, what it reads, how it picks k layers (its function), whether it scores the probe corpus as it picks (greedy),
and how its line is drawn. config.py takes the names and help from here, the curve plot its colour, marker and
label, and the curve command dispatches on `reads`, `rescores` and `picks`: nothing branches on a strategy's name.

A new strategy is one register_strategy(Strategy(...)) and its picking function, (commands.prune.curve.Choice) ->
{k: the k layers removed}; the built-ins' live in commands/prune/curve.py, named here as 'module:function' (they
load torch and pandas, which `import layerprobe` and --help never do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from layerprobe.registry import Registry
from layerprobe.runs.kinds import resolve_ref

CURVE = "layerprobe.commands.prune.curve:"  # the built-ins' picking functions


@dataclass(frozen=True)
class Strategy:
    name: str
    meaning: str  # for --strategies' help
    reads: str  # "angular": an angular run of the model (measured on the probe corpus when none is given);
    # "corpus": the probe corpus, scored as it picks; "": nothing but the layer count
    label: str  # the curve plot's legend
    colour: str
    marker: str
    picks: str | Callable[[Any], dict]  # (commands.prune.curve.Choice) -> {k: sorted ids of the k layers removed}
    rescores: bool = False  # it picks by scoring the model on the probe corpus (--greedy-metric, under --greedy-ends):
    # that metric needs its head, its choice is made on the tokens a task-free curve is scored on (a warning), and
    # the summary records greedy_metric and greedy_ends

    def pick(self, choice: Any) -> dict[int, list[int]]:
        """{k: the k layers removed} for k = 1..choice.k_max."""
        return resolve_ref(self.picks)(choice)


STRATEGIES: dict[str, Strategy] = Registry("curve strategy")


def register_strategy(strategy: Strategy) -> Strategy:
    """Add a strategy: --strategies, export/heal --from-curve --strategy and the curve plot take it from here. A
    name held already is refused (registry.py)."""
    return STRATEGIES.add(strategy.name, strategy)


register_strategy(Strategy("angular", "the best block of k consecutive layers by d(l, k) (Gromov et al.)", "angular",
                           "angular (best block of n)", "#c0392b", "o", CURVE + "angular_sets"))
register_strategy(Strategy("bi", "the k layers of smallest Block Influence (ShortGPT)", "angular", "Block Influence",
                           "#2e86c1", "s", CURVE + "bi_sets"))
register_strategy(Strategy("greedy", "SLEB-style, one layer at a time by --greedy-metric on the probe corpus, never "
                           "the first or last remaining block unless --greedy-ends allow", "corpus", "greedy",
                           "#27ae60", "^", CURVE + "greedy_sets", rescores=True))
register_strategy(Strategy("last", "the last k layers", "", "last n layers", "#7f8c8d", "v", CURVE + "last_sets"))
NAMES = tuple(STRATEGIES)  # the built-ins: --strategies' default
