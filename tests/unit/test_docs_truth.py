"""Docs truth (issue 49): every number the README and docs/ quote from a committed run is read from that run's files
here, formatted as the doc writes it, and must appear in the doc. A regenerated run (reports/demo) or an edited
number makes this fail, naming the doc, the run and the text it should hold. Values are read at test time, never
written down here."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def summary(run: str) -> dict:
    return json.loads((ROOT / run / "summary.json").read_text(encoding="utf-8"))


def gradnorm(run: str, placement: str, key: str = "params_late_over_early") -> float:
    return summary(run)["placements"][placement][key]


def distance(run: str, layer: int) -> float:
    """d(l, 1) of one layer, from angular.csv."""
    table = pd.read_csv(ROOT / run / "angular.csv")
    return float(table[(table["n"] == 1) & (table["layer"] == layer)]["distance"].iloc[0])


def distances(run: str, layers: range) -> list[float]:
    return [distance(run, layer) for layer in layers]


def cheapest(run: str, rank: int) -> pd.Series:
    """The `rank`-th cheapest single-layer removal of prune.csv (0: the cheapest), lower-is-better metric."""
    table = pd.read_csv(ROOT / run / "prune.csv")
    return table.sort_values("pruned").iloc[rank]


def deep_third_median(run: str) -> float:
    """The median cost of removing one layer of the last third (layers >= 2L/3) of prune.csv."""
    table = pd.read_csv(ROOT / run / "prune.csv")
    layers = int(table["layer"].max()) + 1
    return float(table[table["layer"] >= -(-2 * layers // 3)]["pruned"].median())


@dataclass
class Quote:
    doc: str  # the file, relative to the project
    text: str  # the quoted words, with {} where each number goes (whitespace is compared collapsed)
    run: str  # the committed run folder the numbers come from
    values: Callable[[str], list[str]]  # the run folder -> the numbers, formatted as the doc prints them


GRAD = "reports/demo/gradnorm"
GEMMA_ANGULAR, GEMMA_KL = "reports/demo/gemma3-angular", "reports/demo/gemma3-prune-kl"
REPAIR = "reports/examples/smollm2-repair/k7-12-18-lstsq-defaults"

QUOTES = [
    Quote("README.md", "the last third's parameter gradient norm over the first third's is {}x under Pre-LN, {}x under "
          "LNS, {}x (Post-LN) and {}x (Mix-LN); output variance grows {}x with depth (Pre-LN).", GRAD,
          lambda run: [f"{gradnorm(run, p):.2f}" for p in ("pre", "lns", "post", "mix")]
          + [f"{gradnorm(run, 'pre', 'variance_late_over_early'):.1f}"]),
    Quote("docs/guide.md", "Pre-LN's last third of layers gets {}x the parameter gradient norm of its first third, LNS "
          "{}x; Post-LN {}x and Mix-LN {}x are balanced; output variance grows {}x with depth under Pre-LN and {}x "
          "under LNS.", GRAD,
          lambda run: [f"{gradnorm(run, p):.2f}" for p in ("pre", "lns", "post", "mix")]
          + [f"{gradnorm(run, p, 'variance_late_over_early'):.1f}" for p in ("pre", "lns")]),
    Quote("docs/guide.md", '"pre: the last third of layers has {}x the parameter gradient norm of the first third', GRAD,
          lambda run: [f"{gradnorm(run, 'pre'):.2f}"]),
    Quote("README.md", "d(l, 1) is smallest in the middle and deep half ({}, {} for layers 8, 9; {}-{} for 13-17), "
          "largest for layers 0 ({}), 5 ({}, the first full-attention layer) and 1.", GEMMA_ANGULAR,
          lambda run: [f"{distance(run, 8):.3f}", f"{distance(run, 9):.3f}",
                       f"{min(distances(run, range(13, 18))):.2f}", f"{max(distances(run, range(13, 18))):.2f}",
                       f"{distance(run, 0):.2f}", f"{distance(run, 5):.2f}"]),
    Quote("README.md", "The cheapest removals are middle layers {}, {}, {} (kl {}-{})", GEMMA_KL,
          lambda run: [str(int(cheapest(run, i)["removed"])) for i in range(3)]
          + [f"{cheapest(run, 0)['pruned']:.2f}", f"{cheapest(run, 2)['pruned']:.2f}"]),
    Quote("README.md", "the deep third costs more to remove than SmolLM2's (median kl {} against {})", GEMMA_KL,
          lambda run: [f"{deep_third_median(run):.2f}", f"{deep_third_median('reports/demo/smollm2-prune-kl'):.2f}"]),
    Quote("docs/heal.md", "| {} | {} | fit {} s | {} (load ~10) |", REPAIR,
          lambda run: [f"{summary(run)['heldout_after']['ppl']:.2f}", f"{summary(run)['heldout_after']['kl']:.3f}",
                       f"{summary(run)['repair_seconds']:.0f}", minutes(summary(run)["seconds"])]),
    Quote("docs/heal.md", "| {} | {} | not recorded apart | {} (load 1) |", "reports/examples/smollm2-heal-12-18",
          lambda run: [f"{summary(run)['heldout_after']['ppl']:.2f}", f"{summary(run)['heldout_after']['kl']:.3f}",
                       minutes(summary(run)["seconds"])]),
    Quote("docs/heal.md", "SmolLM2 without 12-18 at heal's defaults but --tokens 8192, the kl after lstsq is {}", REPAIR,
          lambda run: [f"{summary(run)['heldout_after']['kl']:.3f}"]),
]


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def collapsed(text: str) -> str:
    return " ".join(text.split())


def stale(doc_text: str, quote: Quote) -> str | None:
    """None when the doc holds the quote with the run's numbers; else what it should hold."""
    expected = quote.text.format(*quote.values(quote.run))
    return None if collapsed(expected) in collapsed(doc_text) else expected


@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: f"{q.doc}:{q.run}:{q.text[:30]}")
def test_every_quoted_number_is_the_committed_runs(quote):
    expected = stale((ROOT / quote.doc).read_text(encoding="utf-8"), quote)
    assert expected is None, (f"{quote.doc} quotes {quote.run} out of date: it should say \"{expected}\" (read from "
                              "the run's files); update the doc, or the run if the doc is right.")


@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: f"{q.doc}:{q.text[:30]}")
def test_an_edited_number_fails(quote):
    """The check is not vacuous: the doc with any one quoted number changed by one in its last digit fails it."""
    text = collapsed((ROOT / quote.doc).read_text(encoding="utf-8"))
    expected = collapsed(quote.text.format(*quote.values(quote.run)))
    assert expected in text
    for match in re.finditer(r"\d+(\.\d+)?", expected):
        number = match.group()
        edited = number[:-1] + str((int(number[-1]) + 1) % 10)
        wrong = expected[:match.start()] + edited + expected[match.end():]
        assert stale(text.replace(expected, wrong), quote) is not None
