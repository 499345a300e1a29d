"""A hub model or dataset with the hub unreachable: angular and prune say so in one line, without retries; a hub
corpus fails before datasets streams. Moved from tests/unit/test_hub.py (issue 52 item 7): the command runs as far
as resolving the model, which imports transformers, and the corpus test imports datasets; the unit tier keeps the
hub checks that import neither."""

from __future__ import annotations

import pytest

from layerprobe.data.corpora import open_corpus
from layerprobe.errors import HubDatasetUnavailable
from tests.unit.test_hub import dead_hub  # noqa: F401  (the fixture: online mode, the endpoint on a dead port)


def test_hub_dataset_with_dead_hub_fails_before_streaming(dead_hub, monkeypatch):
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("the hub library was asked")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(HubDatasetUnavailable, match="unreachable.*--dataset builtin"):
        open_corpus("someone/corpus:en:train")


@pytest.mark.parametrize("command", [["angular"], ["prune", "--task", "kl"]])
def test_hub_model_with_dead_hub_is_one_line_without_retries(command, dead_hub, tmp_path):
    from tests.helpers import assert_error, invoke

    result = invoke(*command, "nobody/no-model", "--dataset", "builtin", "--out", tmp_path / "run")
    assert_error(result, "Model 'nobody/no-model' is neither a local folder nor in the hub cache")
    assert "unreachable" in result.output and "Retry" not in result.output
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
