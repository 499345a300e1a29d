"""Findings that must not mislead: a threshold that covers most of the stack picks nothing, a sweep whose unpruned
model scores at chance says its ranking is noise, and one outlying layer does not speak for a third of the stack."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import pandas as pd

from layerprobe.commands.angular.read import angular_findings
from layerprobe.commands.prune.read import prune_findings
from layerprobe.metrics.stats import depth_ratio
from layerprobe.runs.read import Run


def angular_run(distances: list[float]) -> Run:
    rows = [{"layer": layer, "n": 1, "distance": d, "tokens": 100} for layer, d in enumerate(distances)]
    return Run(Path("."), "angular", {"model": "m", "num_layers": len(distances)}, {},
               {"angular": pd.DataFrame(rows)})


def test_a_threshold_under_most_layers_names_no_candidates():
    many = angular_run([0.5, 0.15, 0.12, 0.1, 0.11, 0.13, 0.14, 0.3])  # 6 of 8 under 0.2, as SmolLM2's 28 of 30
    text = " ".join(angular_findings(many))
    assert "candidates for removal" not in text and "6 of 8 layers change the representation by less than 0.2" in text
    few = angular_run([0.5, 0.4, 0.35, 0.1, 0.45, 0.3, 0.4, 0.5])  # one layer under the line: a candidate
    assert "Layer 3 changes the representation by less than 0.2 (angular distance d(l, 1)): candidate for" in \
        " ".join(angular_findings(few))


def prune_run(task: str, baseline: float, stderr: float) -> Run:
    rows = [{"layer": i, "block": 1, "removed": str(i), "metric": "acc", "baseline": baseline,
             "pruned": baseline - 0.01 * i, "delta": -0.01 * i, "baseline_stderr": stderr, "pruned_stderr": stderr}
            for i in range(6)]
    summary = {"model": "m", "task": task, "metric": "acc", "higher_is_better": True, "baseline": baseline,
               "block": 1}
    return Run(Path("."), "prune", summary, {}, {"prune": pd.DataFrame(rows)})


def test_a_sweep_at_chance_says_its_ranking_is_noise():
    at = " ".join(prune_findings(prune_run("mmlu_anatomy", 0.2, 0.035)))  # MMLU anatomy at 0.2: below chance
    assert "scores at chance (acc 0.2, chance 0.25)" in at and "ranking below says little" in at
    near = " ".join(prune_findings(prune_run("arc_easy", 0.30, 0.03)))  # within two standard errors of 0.25
    assert "scores at chance" in near
    above = " ".join(prune_findings(prune_run("arc_easy", 0.60, 0.02)))
    assert "chance" not in above and "Cheapest to remove" in above
    assert "chance" not in " ".join(prune_findings(prune_run("my_local_task", 0.2, 0.03)))  # chance unknown


def test_one_outlying_layer_does_not_speak_for_its_third():
    # a Post-LN model's input gradients: layer 0 50x every other layer, the rest flat
    values = [50.0] + [1.0] * 11
    assert depth_ratio(values) == 1.0  # flat: the mean of the thirds said 1 / 12.75 = 0.08, "vanishing"
    assert depth_ratio([4.0, 4.0, 4.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]) == 0.25  # a real trend still shows


def test_no_change_reads_0_and_a_one_layer_block_reads_as_its_layer():
    from layerprobe.evaluation.variants import ranges_label
    from layerprobe.report.findings import signed

    assert signed(0.0) == "0" and signed(0.25) == "+0.25" and signed(-1.5e-4) == "-0.00015"
    assert ranges_label([25]) == "25" and ranges_label([3, 4, 5]) == "3-5"  # the summary's prune_first layers


def test_a_healed_curve_is_read_against_the_unpruned_model_healed_alike():
    from layerprobe.commands.prune.read_curve import curve_findings

    rows = [{"strategy": "angular", "k": k, "fraction": k / 10, "removed": str(k), "metric": "ppl", "baseline": 20.0,
             "score": 20.0 + 5 * k, "delta": 5.0 * k, "within": False, "healed_score": 15.0 + k} for k in (1, 2)]
    summary = {"model": "m", "num_layers": 10, "metric": "ppl", "keep": 0.95, "baseline": 20.0, "heal_steps": 20,
               "healed_baseline": 14.5, "curve": {"angular": {"max_k": 0, "removed": "", "score": None}}}
    text = " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))
    assert "angular healed (20 LoRA steps): without 2 layers ppl 30 -> 17, against 14.5 for the unpruned" in text
    assert "paired 95% intervals" not in text  # a curve written before the healed intervals: none stated
    rows[-1] |= {"heal_change": -13.0, "heal_change_lo": -15.0, "heal_change_hi": -11.0, "healed_delta": 2.5,
                 "healed_delta_lo": -0.5, "healed_delta_hi": 5.5}
    text = " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))
    assert ("the repair's change -15 to -11, excludes 0; healed minus the reference -0.5 to +5.5, 0 inside it"
            in text)
    summary["heal_steps"] = 0  # not healed: no such sentence
    assert "healed" not in " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))


def test_a_heal_says_what_share_of_the_removals_ppl_cost_it_won_back():
    from layerprobe.commands.heal.read import heal_findings

    summary = {"removed": "12-18", "objective": "lm", "steps": 200, "lora_rank": 8, "heldout_unpruned_ppl": 20.0,
               "heldout_before": {"ppl": 60.0, "kl": 0.9}, "heldout_after": {"ppl": 30.0, "kl": 0.7}}
    (text,) = heal_findings(Run(Path("."), "heal", summary, {}, {}))  # no heldout_change, no merged: one sentence
    assert "from 60 to 30 (the unpruned model's: 20; 75% of the removal's cost won back)" in text  # 30 / 40
    summary |= {"merged": "merged", "merged_bytes": 435_900_000}
    assert heal_findings(Run(Path("."), "heal", summary, {}, {}))[1] == (
        "merged/ holds the healed model as a plain transformers checkpoint (436 MB).")
    del summary["heldout_unpruned_ppl"]  # an older record: the sentence without the share
    assert "won back" not in heal_findings(Run(Path("."), "heal", summary, {}, {}))[0]


# ---- each finding checked against the table it summarizes -------------------------------------------------------

def sweep_with_records(changes: dict[int, tuple[int, int]], n: int = 200, layers: int = 8, stderr: bool = True) -> Run:
    """An accuracy sweep with records: the unpruned model right on the first 60% of n questions; removing layer l
    breaks `lost` right answers and fixes `gained` wrong ones (changes[l] = (lost, gained), default none)."""
    from layerprobe.evaluation.records import add_intervals

    before = np.array([1.0] * (n * 6 // 10) + [0.0] * (n - n * 6 // 10))
    records = [{"removed": "unpruned", "task": "t", "doc_id": i, "acc": v} for i, v in enumerate(before)]
    rows = []
    for layer in range(layers):
        lost, gained = changes.get(layer, (0, 0))
        after = before.copy()
        after[:lost] = 0.0
        after[n - gained:] = 1.0
        records += [{"removed": str(layer), "task": "t", "doc_id": i, "acc": v} for i, v in enumerate(after)]
        se = math.sqrt(before.mean() * (1 - before.mean()) / (n - 1)) if stderr else float("nan")
        rows.append({"layer": layer, "block": 1, "removed": str(layer), "metric": "acc", "baseline": before.mean(),
                     "pruned": after.mean(), "delta": after.mean() - before.mean(), "baseline_stderr": se,
                     "pruned_stderr": se})
    table = add_intervals(pd.DataFrame(rows), records, "t")
    summary = {"model": "m", "task": "t", "metric": "acc", "higher_is_better": True, "baseline": before.mean(),
               "block": 1, "records": "samples.csv.gz", "num_layers": layers}
    return Run(Path("."), "prune", summary, {}, {"prune": table})


def sentence(found: list[str], start: str) -> str:
    hits = [s for s in found if s.startswith(start)]
    assert len(hits) == 1, found
    return hits[0]


def test_measurably_worse_names_exactly_the_significant_layers_with_their_intervals():
    run = sweep_with_records({0: (60, 0), 3: (25, 1), 5: (4, 2), 6: (0, 30)})
    table = run.tables["prune"]
    found = prune_findings(run)
    worse = sentence(found, "Measurably worse without")
    expected = table[table["significant"] & (table["delta"] < 0)].sort_values("delta")
    assert list(expected["removed"]) == ["0", "3"]  # 4 lost, 2 gained: not measurable
    for row in expected.itertuples():
        assert f"{row.removed} (dP {row.delta:+.3g}, 95% interval {row.delta_lo:+.3g} to {row.delta_hi:+.3g})" in worse
    assert "5 (" not in worse and "Holm's correction over a family of 8 tests" in worse
    better = sentence(found, "Measurably better without")
    assert "6 (dP +0.15" in better and table.set_index("removed").loc["6", "significant"]
    assert sentence(found, "The other").startswith(f"The other {8 - 3} removals are not measurably different")
    # the depth sentence places the measurable removals, costliest first
    assert "costliest measurable removals sit at relative depth 0.00, 0.43" in " ".join(found)
    assert not any("Cheapest" in s for s in found)


def test_no_significant_removal_names_no_layer():
    run = sweep_with_records({1: (3, 1), 2: (2, 0)})
    found = prune_findings(run)
    assert not run.tables["prune"]["significant"].any()
    text = " ".join(found)
    assert "No removal changes acc measurably" in text and "Cheapest" not in text and "costliest" not in text


def test_the_gold_loglikelihood_sentence_names_exactly_what_holm_keeps_from_its_intervals():
    """acc separates nothing; the gold answer's loglikelihood intervals, set by hand: p from each interval by hand
    (normal, half-width / 1.96): removal 0 z = 9.8, 1 z = 1.63 (p 0.10, interval holds 0), 2 z = 5.9, 3 z = 7.8;
    Holm over 4 keeps 0, 3 and 2."""
    run = sweep_with_records({1: (3, 1), 2: (2, 0)}, layers=4)
    table = run.tables["prune"]
    hand = {"0": (-5.0, -6.0, -4.0), "1": (-1.0, -2.2, 0.2), "2": (1.5, 1.0, 2.0), "3": (-0.8, -1.0, -0.6)}
    for column, i in (("loglik_delta", 0), ("loglik_lo", 1), ("loglik_hi", 2)):
        table[column] = [hand[r][i] for r in table["removed"]]
    found = prune_findings(run)
    text = sentence(found, "The gold answer's loglikelihood")
    assert "drops measurably without 2 of 4, most without 0 (-5, -6 to -4), 3 (-0.8, -1 to -0.6)" in text
    assert "it rises without 1: 2 (+1.5, +1 to +2)" in text and "1 (-1" not in text
    table["loglik_lo"], table["loglik_hi"] = table["loglik_delta"] - 50, table["loglik_delta"] + 50
    assert "does not separate them either" in sentence(prune_findings(run), "The gold answer's loglikelihood")


def test_the_gold_loglikelihood_sentence_reads_the_tables_own_holm_verdict():
    """A prune.csv with loglik_p_value and loglik_significant (written by evaluation/records.py from the records'
    t test): the sentence names exactly the rows flagged there, not a verdict re-derived from the intervals."""
    run = sweep_with_records({1: (3, 1), 2: (2, 0)}, layers=4)
    table = run.tables["prune"]
    hand = {"0": (-5.0, -6.0, -4.0, 1e-9, False), "1": (-1.0, -2.2, 0.2, 0.1, False),
            "2": (1.5, 1.0, 2.0, 1e-6, True), "3": (-0.8, -1.0, -0.6, 1e-5, True)}
    for i, column in enumerate(("loglik_delta", "loglik_lo", "loglik_hi", "loglik_p_value", "loglik_significant")):
        table[column] = [hand[r][i] for r in table["removed"]]
    text = sentence(prune_findings(run), "The gold answer's loglikelihood")
    assert "drops measurably without 1 of 4, most without 3 (-0.8, -1 to -0.6)" in text
    assert "it rises without 1: 2 (+1.5, +1 to +2)" in text and "0 (-5" not in text


def test_one_document_ranks_nothing():
    """MMLU --limit 1: records of one question give no interval and the baseline no stderr: no layer is named as
    least or most important."""
    run = sweep_with_records({0: (1, 0)}, n=1, layers=4, stderr=False)
    assert run.tables["prune"]["delta_lo"].isna().all()
    text = " ".join(prune_findings(run))
    assert "Too few documents" in text and "Cheapest" not in text and "costliest" not in text


def test_a_run_without_records_ranks_only_beyond_twice_the_stderr():
    inside = prune_run("arc_easy", 0.6, 0.05)  # every |dP| <= 0.05 <= 2 x 0.05
    text = " ".join(prune_findings(inside))
    assert "within twice the baseline's standard error" in text and "Cheapest" not in text
    outside = " ".join(prune_findings(prune_run("arc_easy", 0.6, 0.01)))
    assert "Cheapest to remove, by point estimate" in outside


def test_a_removal_tied_with_the_cheapest_is_never_called_costly():
    """The layer-25 report: many removals at dP 0 and a few that help; a dP-0 layer was listed as cheapest and as
    among the 3 costliest. Ties share one order, and a tie with the cheapest is never costly."""
    from layerprobe.report.findings import conflicts, costliest

    deltas = [0.0] * 8 + [0.02, 0.01]  # removing layers 8 and 9 helps, the rest change nothing
    prune = Run(Path("."), "prune", {"model": "m", "metric": "acc", "higher_is_better": True, "task": "t",
                                     "block": 1, "baseline": 0.5},
                {}, {"prune": pd.DataFrame({"layer": range(10), "removed": [str(i) for i in range(10)],
                                            "metric": "acc", "baseline": 0.5, "delta": deltas,
                                            "baseline_stderr": 0.001})})
    assert costliest(prune, 3) == []
    angular = Run(Path("."), "angular", {"model": "m"}, {}, {"angular": pd.DataFrame(
        {"layer": range(10), "n": 1, "distance": [0.1 * (i + 1) for i in range(10)], "tokens": 1})})
    assert conflicts([angular, prune]) == []
    text = " ".join(prune_findings(prune))
    cheap, costly = text.split("Cheapest to remove", 1)[-1].split("; costliest:")
    assert cheap.split("): ")[1] == "8 (dP +0.02), 9 (dP +0.01)"  # a dP-0 layer tied with the costliest is not cheap
    # the eight dP-0 layers tie: named as one tie, never three of them in an order (issue 47)
    assert costly.split(".")[0].strip() == "0, 1, 2, 3, 4, 5 and 2 more (tied, dP 0)"


def test_a_ranking_sentence_never_cuts_a_tie():
    """Issue 47: cheapest and costliest name whole ties or none of them. Four removals tied at dP -0.1 sit between
    the cheapest (0) and the costliest (5): the old sentence named two of them as cheaper than the other two."""
    deltas = [0.0, -0.1, -0.1, -0.1, -0.1, -0.5]
    rows = pd.DataFrame({"layer": range(6), "block": 1, "removed": [str(i) for i in range(6)], "metric": "acc",
                         "baseline": 0.5, "pruned": [0.5 + d for d in deltas], "delta": deltas})
    run = Run(Path("."), "prune", {"model": "m", "metric": "acc", "higher_is_better": True, "task": "t",
                                   "block": 1, "baseline": 0.5}, {}, {"prune": rows})
    text = " ".join(prune_findings(run))
    assert "Cheapest to remove, by point estimate (this run has no per-document records, so no interval): " \
           "0 (dP 0); costliest: 5 (dP -0.5)." in text
    assert "(dP -0.1)" not in text and "By point estimate, the layer cheapest to remove sits" in text
    tied = rows.assign(delta=[0.0, -0.1, -0.1, -0.1, -0.1, -0.1])  # five tie at the costly end: named whole
    run.tables["prune"] = tied
    assert "costliest: 1, 2, 3, 4, 5 (tied, dP -0.1)." in " ".join(prune_findings(run))


def test_conflicts_state_the_angular_rank_as_the_table_has_it():
    """MiniLM: 'layer 0 changes the representation least' while layer 2 had the smallest d(l, 1): the sentence now
    gives the layer's own distance and rank, read from the same table."""
    from layerprobe.report.findings import conflicts

    distances = [0.30, 0.40, 0.20, 0.50, 0.45, 0.35]
    angular = Run(Path("."), "angular", {"model": "m"}, {}, {"angular": pd.DataFrame(
        {"layer": range(6), "n": 1, "distance": distances, "tokens": 1})})
    run = sweep_with_records({0: (60, 0), 1: (1, 0)}, layers=6)
    found = conflicts([angular, run])
    assert len(found) == 1
    order = sorted(range(6), key=lambda layer: distances[layer])
    assert f"layer 0 (d(l, 1) = 0.300, rank {order.index(0) + 1} of 6)" in found[0] and "measurably worse" in found[0]
    assert "changes the representation least" not in found[0]


def test_too_few_layers_never_names_a_signal_to_trust():
    s = {"model": "m", "task": "t", "metric": "kl", "higher_is_better": False, "block": 1,
         "spearman_delta": {"angular": 0.9, "block_influence": 0.8}, "spearman_angular_delta": 0.9}
    rows = [{"layer": i, "block": 1, "removed": str(i), "metric": "kl", "baseline": 0.0, "pruned": 0.1 * (i + 1),
             "delta": 0.1 * (i + 1), "baseline_stderr": None, "pruned_stderr": None} for i in range(4)]
    text = " ".join(prune_findings(Run(Path("."), "prune", s, {}, {"prune": pd.DataFrame(rows)})))
    assert "too few layers to tell" in text and "to trust" not in text.replace("which to trust", "")


def test_curve_points_say_measurable_only_when_significant():
    from layerprobe.commands.prune.read_curve import curve_findings

    table = pd.DataFrame([
        {"strategy": "last", "k": 1, "fraction": 0.25, "removed": "3", "metric": "acc", "baseline": 0.6, "score": 0.58,
         "delta": -0.02, "within": True, "delta_lo": -0.05, "delta_hi": 0.01, "significant": False},
        {"strategy": "bi", "k": 2, "fraction": 0.5, "removed": "1-2", "metric": "acc", "baseline": 0.6, "score": 0.57,
         "delta": -0.03, "within": True, "delta_lo": -0.05, "delta_hi": -0.01, "significant": True}])
    s = {"metric": "acc", "higher_is_better": True, "keep": 0.9, "baseline": 0.6, "num_layers": 4,
         "curve": {"last": {"max_k": 1, "removed": "3", "score": 0.58}, "bi": {"max_k": 2, "removed": "1-2", "score": 0.57}}}
    found = curve_findings(Run(Path("."), "curve", s, {}, {"curve": table}))
    assert "dP -0.02, 95% interval -0.05 to +0.01: not measurably different" in found[0]
    assert "dP -0.03, 95% interval -0.05 to -0.01: a measurable change" in found[1]


def _spearman_of_d(findings: list[str]) -> list[float]:
    """Every Spearman value the findings state for d(l, 1): the first bullet's and d(l, 1)'s in the signals list."""
    import re

    text = " ".join(findings)
    said = [float(m) for m in re.findall(r"d\(l, 1\)[^.;]*?Spearman with the cost ([+-]\d\.\d\d)", text)]
    said += [float(m) for m in re.findall(r"[:,] d\(l, 1\) ([+-]\d\.\d\d)", text)]
    return said


def signal_run(higher: bool, rho_with_dp: float) -> Run:
    """A sweep of 30 layers with the angular run's correlations as summary.json records them: Spearman with dP."""
    run = prune_run("arc_easy" if higher else "kl", 0.7, 0.01)
    run.summary.update({"higher_is_better": higher, "spearman_angular_delta": rho_with_dp,
                        "spearman_delta": {"angular": rho_with_dp, "block_influence": rho_with_dp * 1.04}})
    run.tables["prune"] = pd.concat([run.tables["prune"]] * 5, ignore_index=True).assign(
        layer=range(30), removed=[str(i) for i in range(30)])
    return run


@pytest.mark.parametrize("higher, rho_with_dp, cost", [(True, -0.52, +0.52), (False, 0.78, 0.78),
                                                       (True, 0.45, -0.45)])
def test_every_spearman_of_d_is_stated_with_the_cost_of_removal(higher, rho_with_dp, cost):
    """One sign convention (issue 49 item 5: "Spearman -0.52" then "d(l, 1) +0.52" in adjacent bullets of the ARC
    run): every rho the findings state is with the cost of removal, -dP for accuracy, dP for kl; by hand."""
    said = _spearman_of_d(prune_findings(signal_run(higher, rho_with_dp)))
    assert len(said) == 2 and said == [cost, cost], said


def test_the_sign_check_catches_the_old_mixed_convention(monkeypatch):
    """Broken on purpose: the first bullet stating rho with dP (the old code) fails the check above."""
    import layerprobe.commands.prune.read as read

    real = read.cost_rho
    calls = []

    def mixed(rho: float, higher: bool) -> float:
        calls.append(rho)
        return rho if len(calls) == 1 else real(rho, higher)  # the first bullet's rho left with dP

    monkeypatch.setattr(read, "cost_rho", mixed)
    said = _spearman_of_d(prune_findings(signal_run(True, -0.52)))
    assert said and sorted(said) == [-0.52, 0.52], said
