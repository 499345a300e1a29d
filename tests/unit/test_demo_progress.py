"""The demo's progress (issue 49 items 8, 11): each sub-run's stages say which step of how many they belong to and
what they count, and the overall bar's position is the expected work done, each step weighted by the committed
reference run's seconds, so its ETA is the whole demo's. No model is loaded: the steps are settings only."""

from __future__ import annotations

from layerprobe.commands.demo import OVERALL, _expected_seconds, _Overall, demo_steps


def test_overall_bar_weights_steps_by_the_reference_and_labels_say_step_and_unit(tmp_path):
    steps = demo_steps(tmp_path / "demo", quick=False)
    calls: list = []
    overall = _Overall(steps, False, lambda *call: calls.append(call))
    weights = [_expected_seconds(step, False) for step in steps]
    assert all(w > 1 for w in weights)
    report = overall.stage(2, steps[2].name)  # the third step, half of its tokens done
    report("tokens", 50, 100)
    inner = [c for c in calls if c[0] != OVERALL]
    assert inner == [(f"step 3/{len(steps)}, {steps[2].name}: tokens", 50, 100)]
    by_hand = round(1000 * (weights[0] + weights[1] + weights[2] / 2) / sum(weights))
    assert calls[-1] == (OVERALL, by_hand, 1000)
    assert calls[0] == (OVERALL, round(1000 * (weights[0] + weights[1]) / sum(weights)), 1000)  # at the step's start
    overall.finish()
    assert calls[-1] == (OVERALL, 1000, 1000)
