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


@pytest.mark.parametrize("command", [["angular"], ["prune", "--task", "kl"], ["export", "--remove", "0"],
                                     ["heal", "--remove", "0", "--method", "lstsq"]])
def test_hub_model_with_dead_hub_is_one_line_without_retries(command, dead_hub, tmp_path, monkeypatch):
    """In any order of the suite (the hub library's endpoint read at its import, before or after the fixture): no
    hub call at all, where each would retry for half a minute (angular's config peek for its lens once did)."""
    import huggingface_hub.file_download as download

    from tests.helpers import assert_error, invoke

    def never(*args, **kwargs):
        raise AssertionError("the hub library was asked")

    monkeypatch.setattr(download, "get_hf_file_metadata", never)
    data = ["--dataset", "builtin"] if command[0] != "export" else []
    result = invoke(command[0], "nobody/no-model", *command[1:], *data, "--out", tmp_path / "run")
    assert_error(result, "Model 'nobody/no-model' is neither a local folder nor in the hub cache")
    assert "unreachable" in result.output and "Retry" not in result.output
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
