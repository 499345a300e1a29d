"""The task-free metric the dummy package adds by its record alone (issue 52; tests/data/dummy_command), scored on
torch tensors by its own function and tolerance: against a plain loop over the entries. Default tier: torch. (The
column and the strategy it adds: tests/unit/test_records_added.py.)"""

from __future__ import annotations

import pytest
import torch


def test_the_added_metric_is_scored_by_its_own_function_and_tolerance(added):
    from layerprobe.commands.prune.sweeps import task_kind
    from layerprobe.evaluation.metric import has_baseline, tolerance_edge, within
    from layerprobe.evaluation.taskfree import add_baseline, metric_rows, Sums

    torch.manual_seed(0)
    original, pruned, ids = torch.randn(2, 3, 5), torch.randn(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
    total, count, rows = metric_rows("absdiff", original, pruned, ids)
    by_hand = [[sum(abs(float(pruned[s, t, d]) - float(original[s, t, d])) / 5 for d in range(5)) for t in range(3)]
               for s in range(2)]  # a plain loop over the entries
    assert count == 6 and total == pytest.approx(sum(map(sum, by_hand)), rel=1e-12)
    assert [r[0] for r in rows] == pytest.approx([sum(r) for r in by_hand], rel=1e-12) and [r[1] for r in rows] == [3, 3]
    sums = Sums()
    add_baseline("absdiff", original, ids, sums)
    assert sums.baseline == [0.0, 0]  # zero_baseline: the model against itself is 0, nothing to score
    assert task_kind("absdiff") == "taskfree" and not has_baseline("absdiff")
    assert tolerance_edge("absdiff", False, 0.0, 0.9) == pytest.approx(0.1)  # its own rule, 1 - keep
    assert within("absdiff", False, 0.0, 0.05, 0.9) and not within("absdiff", False, 0.0, 0.2, 0.9)
