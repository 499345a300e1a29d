"""Docs truth (issue 49): every number the README and docs/ quote from a committed run is read from that run's files
here, formatted as the doc writes it, and must appear in the doc. A regenerated run (reports/demo) or an edited
number makes this fail, naming the doc, the run and the text it should hold. Values are read at test time, never
written down here."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache  # each committed file is read once for all the quotes (read only: never changed in place)
def _read(run: str, name: str):
    path = ROOT / run / name
    return json.loads(path.read_text(encoding="utf-8")) if name.endswith(".json") else pd.read_csv(path)


def summary(run: str) -> dict:
    return _read(run, "summary.json")


def gradnorm(run: str, placement: str, key: str = "params_late_over_early") -> float:
    return summary(run)["placements"][placement][key]


def distance(run: str, layer: int) -> float:
    """d(l, 1) of one layer, from angular.csv."""
    table = _read(run, "angular.csv")
    return float(table[(table["n"] == 1) & (table["layer"] == layer)]["distance"].iloc[0])


def distances(run: str, layers: range) -> list[float]:
    return [distance(run, layer) for layer in layers]


def cheapest(run: str, rank: int) -> pd.Series:
    """The `rank`-th cheapest single-layer removal of prune.csv (0: the cheapest), lower-is-better metric."""
    table = _read(run, "prune.csv")
    return table.sort_values("pruned").iloc[rank]


def deep_third_median(run: str) -> float:
    """The median cost of removing one layer of the last third (layers >= 2L/3) of prune.csv."""
    table = _read(run, "prune.csv")
    layers = int(table["layer"].max()) + 1
    return float(table[table["layer"] >= -(-2 * layers // 3)]["pruned"].median())


def rows(run: str, table: str = "prune") -> pd.DataFrame:
    return _read(run, f"{table}.csv")


def pruned(run: str, layer: int) -> pd.Series:
    """prune.csv's main-metric row without one layer."""
    table = rows(run)
    return table[(table["removed"].astype(str) == str(layer)) & (table["metric"] == summary(run)["metric"])].iloc[0]


def smallest(run: str, count: int, largest: bool = False) -> list[tuple[int, float]]:
    """(layer, d(l, 1)) of the `count` smallest (or largest, largest first) distances of angular.csv."""
    table = rows(run, "angular")
    table = table[table["n"] == 1].sort_values("distance", ascending=not largest).head(count)
    return [(int(layer), float(d)) for layer, d in zip(table["layer"], table["distance"])]


def cost_rho(run: str, signal: str | None = None) -> float:
    """A Spearman of the run's summary with the cost of removal (the findings' one convention: -dP where higher is
    better); signal None: spearman_angular_delta."""
    s = summary(run)
    rho = s["spearman_angular_delta"] if signal is None else s["spearman_delta"][signal]
    return -rho if s["higher_is_better"] else rho


def loglik_drops(run: str) -> int:
    """Removals whose gold loglikelihood drops measurably (Holm over the main metric's rows)."""
    table = rows(run)
    main = table[table["metric"] == summary(run)["metric"]]
    return int((main["loglik_significant"].astype(bool) & (main["loglik_delta"] < 0)).sum())


def curve_score(run: str, strategy: str, k: int) -> pd.Series:
    table = rows(run, "curve")
    return table[(table["strategy"] == strategy) & (table["k"] == k)].iloc[0]


def _together(run: str) -> int:
    """The largest k up to which angular, Block Influence and greedy stay within 0.1 of each other at every k."""
    table = rows(run, "curve").pivot(index="k", columns="strategy", values="score")[["angular", "bi", "greedy"]]
    spread = (table.max(axis=1) - table.min(axis=1)) <= 0.1
    return int(spread.index[~spread.cummin()].min() - 1) if not spread.all() else int(spread.index.max())


def _sequences(run: str) -> int:
    """Probe sequences of a task-free run: its tokens over its seq_len."""
    s = summary(run)
    return s["tokens"] // s["seq_len"]


def thousands(x: float) -> str:
    return f"{round(x, -3):,.0f}"


@dataclass
class Quote:
    doc: str  # the file, relative to the project
    text: str  # the quoted words, with {} where each number goes (whitespace is compared collapsed)
    run: str  # the committed run folder the numbers come from
    values: Callable[[str], list[str]]  # the run folder -> the numbers, formatted as the doc prints them


GRAD = "reports/demo/gradnorm"
GEMMA_ANGULAR, GEMMA_KL = "reports/demo/gemma3-angular", "reports/demo/gemma3-prune-kl"
REPAIR = "reports/examples/smollm2-repair/k7-12-18-lstsq-defaults"
SMOL_ANGULAR, SMOL_KL, SMOL_PPL = (f"reports/demo/smollm2-{r}" for r in ("angular", "prune-kl", "prune-ppl"))
ARC, ARC_CURVE = "reports/examples/smollm2-prune-arc_easy", "reports/examples/smollm2-curve-arc_easy"
MMLU = "reports/examples/smollm2-prune-mmlu-5shot-limit10"
GEMMA_CURVE = "reports/examples/gemma3-curve-arc_easy"
ANATOMY, HEALED_CURVE = "reports/examples/smollm2-prune-mmlu_anatomy-5shot", "reports/examples/smollm2-curve-ppl-healed"


def _verdicts(run: str) -> list[str]:
    """A curve's two verdicts as its findings word them: 'no' k can go (every strategy's max_k 0), 'no' strategy
    measurably better (strategy_test best null); else the strategy's name."""
    s = summary(run)
    can_go = "no" if all(v["max_k"] == 0 for v in s["curve"].values()) else "some"
    best = s["strategy_test"]["best"] or "no"
    return [can_go, best]


def _smollm2_angular(run: str) -> list[str]:
    low, high = smallest(run, 5), smallest(run, 3, largest=True)
    return [str(low[0][0]), f"{low[0][1]:.3f}", *(str(layer) for layer, _ in low[1:]), str(high[0][0]),
            f"{high[0][1]:.3f}", str(high[1][0]), str(high[2][0])]


def _smollm2_costs(run: str) -> list[str]:
    ppl_25, ppl_0 = pruned(SMOL_PPL, 25), pruned(SMOL_PPL, 0)
    return [f"{pruned(run, 25)['delta']:+.3f}", f"{ppl_25['baseline']:.1f}", f"{ppl_25['pruned']:.1f}",
            f"{pruned(run, 0)['delta']:+.1f}", f"+{thousands(ppl_0['delta'])}"]


def _repair_row(run: str) -> list[str]:
    """The README's repair table, k = 7: none (the lstsq run's before), lstsq, LoRA (smollm2-heal-12-18)."""
    lstsq, lora = summary(run), summary("reports/examples/smollm2-heal-12-18")
    return [f"{lstsq['heldout_unpruned_ppl']:.1f}", f"{lstsq['heldout_before']['ppl']:.1f}",
            f"{lstsq['heldout_before']['kl']:.2f}", f"{lstsq['heldout_after']['ppl']:.1f}",
            f"{lstsq['heldout_after']['kl']:.2f}", f"{lstsq['repair_seconds']:.0f}", f"{lstsq['seconds'] / 60:.0f}",
            f"{lora['heldout_after']['ppl']:.1f}", f"{lora['heldout_after']['kl']:.2f}", f"{lora['seconds'] / 60:.0f}"]


def _mmlu(run: str) -> list[str]:
    s = summary(run)
    return [f"{s['baseline']:.3f}", f"{s['chance_test']['chance']:.2f}", f"{s['chance_test']['baseline']['p']:.2f}",
            f"{s['detectable']['acc']['change']:.3f}", str(loglik_drops(run))]


def _arc_curve(run: str) -> list[str]:
    s = summary(run)
    angular = s["curve"]["angular"]
    row = curve_score(run, "angular", angular["next_k"])
    return [f"{s['baseline']:.2f}", row["removed"], str(angular["next_k"]), f"{row['score']:.2f}",
            thousands(angular["next_needed"])]

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
    Quote("README.md", "| 12-18 (k = 7; `--tokens 8192`; unpruned {}) | {} / {} | {} / {} (fit {} s; whole run {} min, "
          "load ~10) | {} / {} (whole run {} min, load 1) |", REPAIR, lambda run: _repair_row(run)),
    # SmolLM2 in the demo (README and guide), ARC-Easy and MMLU examples (README and guide)
    Quote("README.md", "The smallest d(l, 1) are layers {} ({}), {}, {}, {} and {}; the largest {} ({}), {} and {}.",
          SMOL_ANGULAR, _smollm2_angular),
    Quote("README.md", "Removing layer 25 costs least (kl {}, ppl {} -> {}); removing layer 0 is catastrophic (kl {}, "
          "ppl {}).", SMOL_KL, _smollm2_costs),
    Quote("docs/guide.md", "Removing layer 25 costs least on both sweeps (kl {}, ppl {} -> {}), then 14 and 12 (kl) or "
          "5 and 17 (ppl); removing layer 0 is catastrophic (kl {}, ppl {}), then 29 and 1.", SMOL_KL, _smollm2_costs),
    Quote("README.md", "The angular distance predicts the cost: Spearman {} (kl) and {} (ppl) over 30 layers.", SMOL_KL,
          lambda run: [f"{cost_rho(run):+.2f}", f"{cost_rho(SMOL_PPL):+.2f}"]),
    Quote("docs/guide.md", "the cost: Spearman {} (kl) and {} (ppl) over 30 layers.", SMOL_KL,
          lambda run: [f"{cost_rho(run):+.2f}", f"{cost_rho(SMOL_PPL):+.2f}"]),
    Quote("README.md", "removing the last k layers is the worst choice by far (kl {} nats for one layer, {} for four)",
          "reports/examples/smollm2-curve-kl",
          lambda run: [f"{curve_score(run, 'last', k)['score']:.1f}" for k in (1, 4)]),
    Quote("README.md", "angular, Block Influence and greedy stay within 0.1 nats of each other up to {} layers (point "
          "estimates from {} probe sequences, too few to test); none is within `--keep 0.95`.",
          "reports/examples/smollm2-curve-kl", lambda run: [str(_together(run)), str(_sequences(run))]),
    Quote("docs/guide.md", "the three informed strategies stay within 0.1 nats of each other up to {} layers (point "
          "estimates: {} probe sequences are fewer than the 10 a test needs", "reports/examples/smollm2-curve-kl",
          lambda run: [str(_together(run)), str(_sequences(run))]),
    Quote("README.md", "100 validation questions, {} unpruned): **no k can go** at `--keep 0.95` on the bound "
          "(non-inferiority, one-sided 97.5%); angular's {} ({} layers, {}) is inside only by its point, and its bound "
          "would need about {} questions.", ARC_CURVE, _arc_curve),
    Quote("README.md", "An acc change under {} cannot be seen with 100 questions", ARC_CURVE,
          lambda run: [f"{summary(run)['detectable']['acc']['change']:.2f}"]),
    Quote("README.md", "no acc change is measurable (none under {} could be); the gold loglikelihood drops measurably "
          "without {} of 30", ARC,
          lambda run: [f"{summary(run)['detectable']['acc']['change']:.3f}", str(loglik_drops(run))]),
    Quote("docs/guide.md", "drops measurably without {} of 30 removals", ARC, lambda run: [str(loglik_drops(run))]),
    Quote("docs/guide.md", "An acc change under {} could not have been seen here", ARC,
          lambda run: [f"{summary(run)['detectable']['acc']['change']:.3f}"]),
    Quote("docs/guide.md", "Block Influence predicts the cost about as well as d(l, 1) (Spearman {} against {}; their "
          "difference {}, 95% bootstrap interval over layers {} to {})", ARC,
          lambda run: [f"{cost_rho(run, 'block_influence'):+.2f}", f"{cost_rho(run, 'angular'):+.2f}",
                       *(f"{summary(run)['signal_test'][k]:+.3f}" for k in ("difference", "lo", "hi"))]),
    Quote("README.md", "570 questions): {}, not told from chance {} (p {}); no acc change measurable (none under {} "
          "could be); gold loglikelihood drops without {} of 30", MMLU, _mmlu),
    Quote("docs/guide.md", "SmolLM2-135M scores {} ({} of 570) where chance is {}, which an exact binomial test cannot "
          "tell from chance (p {})", MMLU,
          lambda run: [f"{summary(run)['baseline']:.3f}", str(summary(run)["chance_test"]["baseline"]["correct"]),
                       f"{summary(run)['chance_test']['chance']:.2f}",
                       f"{summary(run)['chance_test']['baseline']['p']:.2f}"]),
    Quote("docs/guide.md", "With 570 questions an acc change under {} cannot be seen (80% power, Holm over 30), nor a "
          "gold-loglikelihood change under {} nats.", MMLU,
          lambda run: [f"{summary(run)['detectable']['acc']['change']:.3f}",
                       f"{summary(run)['detectable']['gold loglikelihood']['change']:.2f}"]),
    Quote("docs/guide.md", "it drops measurably without {} of 30", MMLU, lambda run: [str(loglik_drops(run))]),
    # Gemma 3's ARC-Easy curve (re-run with records, 2026-11-28)
    Quote("README.md", "On ARC-Easy (`reports/examples/gemma3-curve-arc_easy`, 50 questions, {} unpruned) {} k can go "
          "at `--keep 0.95` on the bound, {} strategy is measurably better; it cannot see acc changes under {}.",
          GEMMA_CURVE,
          lambda run: [f"{summary(run)['baseline']:.2f}", *_verdicts(run),
                       f"{summary(run)['detectable']['acc']['change']:.2f}"]),
    Quote("reports/examples/README.md", "{} unpruned; at `--keep 0.95` {} k can go on the bound (non-inferiority, "
          "one-sided 97.5%) for any strategy, and {} strategy is measurably better than another (McNemar, Holm over "
          "the k's); an acc change under {} cannot be seen with 50 questions", GEMMA_CURVE,
          lambda run: [f"{summary(run)['baseline']:.2f}", *_verdicts(run),
                       f"{summary(run)['detectable']['acc']['change']:.2f}"]),
    Quote("reports/examples/README.md", "--batch-size 8` ({} wall by its manifest, single-threaded, shared machine; "
          "`state.json` left out; 11 min in the first run, 2026-11-24)", GEMMA_CURVE, lambda run: [wall(run)]),
    # SmolLM2 5-shot MMLU anatomy and the healed ppl curve (re-run with records, 2026-11-28)
    Quote("reports/examples/README.md", "acc {} ({} of 10), not told from chance 0.25 (exact binomial p {}); no acc "
          "change survives Holm over 30, and none under {} could be seen with 10 questions; the gold loglikelihood "
          "drops measurably without {} of 30", ANATOMY,
          lambda run: [f"{summary(run)['baseline']:.1f}", str(summary(run)["chance_test"]["baseline"]["correct"]),
                       f"{summary(run)['chance_test']['baseline']['p']:.0f}",
                       f"{summary(run)['detectable']['acc']['change']:.2f}", str(loglik_drops(run))]),
    Quote("reports/examples/README.md", "--batch-size 8` ({} wall by its manifest, single-threaded, shared machine; "
          "`state.json` left out; 7 min 41 s in the first run", ANATOMY, lambda run: [wall(run)]),
    Quote("reports/examples/README.md", "{} probe sequences are fewer than the {} a test needs, so no k is judged on "
          "the bound and no healing change is tested (a test would miss a ppl change under about {})", HEALED_CURVE,
          lambda run: [str(summary(run)["documents"]), str(summary(run)["min_documents"]),
                       f"{summary(run)['detectable']['ppl']['change']:.0f}"]),
    Quote("reports/examples/README.md", "see docs/heal.md ({} wall by its manifest, single-threaded, shared machine",
          HEALED_CURVE, lambda run: [wall(run)]),
    Quote("docs/heal.md", "single-threaded on the shared machine, {}, the same numbers below", HEALED_CURVE,
          lambda run: [wall(run)]),
    Quote("reports/examples/README.md", "the same {} sets and scores as the first run; {} probe sequences are fewer "
          "than the {} a test needs, so no k is judged on the bound and no strategy is tested (a test would miss a "
          "kl change under about {})", "reports/examples/smollm2-curve-kl",
          lambda run: [str(summary(run)["sets_scored"]), str(summary(run)["documents"]),
                       str(summary(run)["min_documents"]), f"{summary(run)['detectable']['kl']['change']:.2f}"]),
    Quote("reports/examples/README.md", "--max-removed 8` ({} wall by its manifest, single-threaded, shared machine",
          "reports/examples/smollm2-curve-kl", lambda run: [wall(run)]),
    Quote("bench/README.md", "single-threaded on the shared machine: {} by its manifest.",
          "reports/examples/smollm2-curve-kl", lambda run: [wall(run)]),
    Quote("docs/heal.md", "| 0 | - | {} | {} (healed alike) | - | {} | {} |", HEALED_CURVE,
          lambda run: [f"{summary(run)['baseline']:.2f}", f"{summary(run)['healed_baseline']:.2f}"] * 2),
    Quote("docs/heal.md", "| 4 | {} | {} | {} | {} | {} | {} |", HEALED_CURVE,
          lambda run: [*_healed_point(run, "angular", 4, 1), *_healed_point(run, "last", 4, 0)]),
]


def _healed_point(run: str, strategy: str, k: int, digits: int) -> list[str]:
    """A healed curve's (set, ppl, healed ppl) as docs/heal.md's table prints them."""
    row = curve_score(run, strategy, k)
    return [str(row["removed"]), f"{row['score']:,.{digits}f}", f"{row['healed_score']:,.{digits}f}"]


def wall(run: str) -> str:
    """A run's wall time as its manifest records it."""
    return minutes(json.loads((ROOT / run / "manifest.json").read_text(encoding="utf-8"))["wall_seconds"])


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def collapsed(text: str) -> str:
    return " ".join(text.split())


@functools.cache  # each quote's numbers read from its run once, for both tests and every edited copy of its doc
def quoted(text: str, run: str, values: Callable[[str], list[str]]) -> str:
    """The quote as the run's files say it should read."""
    return text.format(*values(run))


def stale(doc_text: str, quote: Quote) -> str | None:
    """None when the doc holds the quote with the run's numbers; else what it should hold."""
    expected = quoted(quote.text, quote.run, quote.values)
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
    expected = collapsed(quoted(quote.text, quote.run, quote.values))
    assert expected in text
    for match in re.finditer(r"\d+(\.\d+)?", expected):
        number = match.group()
        edited = number[:-1] + str((int(number[-1]) + 1) % 10)
        wrong = expected[:match.start()] + edited + expected[match.end():]
        assert stale(text.replace(expected, wrong), quote) is not None
