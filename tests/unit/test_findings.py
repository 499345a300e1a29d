"""Findings that must not mislead: a threshold that covers most of the stack picks nothing, a sweep whose unpruned
model scores at chance says its ranking is noise, and one outlying layer does not speak for a third of the stack."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from layerprobe.metrics.stats import depth_ratio
from layerprobe.report.findings import angular_findings, prune_findings
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
    assert "scores at chance (acc 0.2, chance 0.25)" in at and "ranking below is noise" in at
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
    from layerprobe.report.findings import curve_findings

    rows = [{"strategy": "angular", "k": k, "fraction": k / 10, "removed": str(k), "metric": "ppl", "baseline": 20.0,
             "score": 20.0 + 5 * k, "delta": 5.0 * k, "within": False, "healed_score": 15.0 + k} for k in (1, 2)]
    summary = {"model": "m", "num_layers": 10, "metric": "ppl", "keep": 0.95, "baseline": 20.0, "heal_steps": 20,
               "healed_baseline": 14.5, "curve": {"angular": {"max_k": 0, "removed": "", "score": None}}}
    text = " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))
    assert "angular healed (20 LoRA steps): without 2 layers ppl 30 -> 17, against 14.5 for the unpruned" in text
    summary["heal_steps"] = 0  # not healed: no such sentence
    assert "healed" not in " ".join(curve_findings(Run(Path("."), "curve", summary, {}, {"curve": pd.DataFrame(rows)})))


def test_a_heal_says_what_share_of_the_removals_ppl_cost_it_won_back():
    from layerprobe.report.findings import heal_findings

    summary = {"removed": "12-18", "objective": "lm", "steps": 200, "lora_rank": 8, "heldout_unpruned_ppl": 20.0,
               "heldout_before": {"ppl": 60.0, "kl": 0.9}, "heldout_after": {"ppl": 30.0, "kl": 0.7}}
    (text,) = heal_findings(Run(Path("."), "heal", summary, {}, {}))
    assert "from 60 to 30 (the unpruned model's: 20; 75% of the removal's cost won back)" in text  # 30 / 40
    del summary["heldout_unpruned_ppl"]  # an older record: the sentence without the share
    assert "won back" not in heal_findings(Run(Path("."), "heal", summary, {}, {}))[0]
