"""--keep-by bound on a curve with one document (issue 47): refused before scoring where the built task knows it scores
one document, and a curve with too few documents never shows '0 of N can go' as if judged. Hand-built settings and
task splits (what lm-eval's built task reports before scoring), no model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from layerprobe.cli.prune import show_curve
from layerprobe.commands.prune.curve import check_intervals
from layerprobe.config import PruneConfig
from layerprobe.errors import ConfigError
from layerprobe.settings import resolve


def settings(keep_by: str, **given):
    config, _ = resolve(PruneConfig, {"task": "zs_mc", "curve": {"keep_by": keep_by}, **given}, {},
                        environ={})
    return config


def built(*scored):
    """A task as open_sweep builds it: per split, its documents and how many --limit/--sample leave scored."""
    return SimpleNamespace(harness=SimpleNamespace(splits={f"t{i}": {"documents": 6, "scored": n}
                                                           for i, n in enumerate(scored)}))


def test_one_document_under_bound_is_refused_before_scoring():
    with pytest.raises(ConfigError, match=r"task 'zs_mc' scores one document \(--limit 1\), which has no interval: .*"
                                          r"--keep-by point"):
        check_intervals(settings("bound", limit=1), 16, built(1))
    with pytest.raises(ConfigError, match=r"scores one document \(--sample 1\)"):
        check_intervals(settings("bound", sample=1), 16, built(1))
    with pytest.raises(ConfigError, match=r"scores one document \(the task itself\)"):
        check_intervals(settings("bound"), 16, built(1))


@pytest.mark.parametrize("keep_by, scored", [("point", (1,)), ("bound", (2,)), ("bound", (1, 1)), ("bound", (None,))])
def test_more_than_one_document_or_point_or_unknown_goes_on(keep_by, scored):
    """Two documents (or --limit 1 over a group's two subtasks) have an interval; point needs none; a split whose size
    is not known before scoring is left to the too-few path after it."""
    check_intervals(settings(keep_by, limit=1), 16, built(*scored))


def test_too_few_documents_show_no_count_of_layers_that_can_go(capsys):
    summary = {"metric": "acc", "baseline": 0.5, "keep": 0.95, "num_layers": 6, "keep_by": "bound", "documents": 2,
               "min_documents": 10, "records": "samples.csv.gz", "sets_scored": 3, "seconds": 1.0,
               "curve": {"last": {"max_k": 0, "removed": "", "score": None}}}
    show_curve(SimpleNamespace(summary=summary, warnings=[], folder="run"))
    shown = " ".join(capsys.readouterr().out.split())
    assert "not judged" in shown and "0 of 6" not in shown
    assert "Too few documents to test (2, fewer than 10): no k is judged" in shown
    show_curve(SimpleNamespace(summary={**summary, "documents": 10}, warnings=[], folder="run"))
    assert "0 of 6" in capsys.readouterr().out
