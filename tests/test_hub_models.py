"""A hub model with the hub unreachable: angular and prune say so in one line, without retries. Moved from
tests/unit/test_hub.py (issue 52 item 7): the command runs as far as resolving the model, which imports transformers;
the unit tier keeps the hub checks that import none."""

from __future__ import annotations

import pytest

from tests.unit.test_hub import dead_hub  # noqa: F401  (the fixture: online mode, the endpoint on a dead port)


@pytest.mark.parametrize("command", [["angular"], ["prune", "--task", "kl"]])
def test_hub_model_with_dead_hub_is_one_line_without_retries(command, dead_hub, tmp_path):
    from tests.helpers import assert_error, invoke

    result = invoke(*command, "nobody/no-model", "--dataset", "builtin", "--out", tmp_path / "run")
    assert_error(result, "Model 'nobody/no-model' is neither a local folder nor in the hub cache")
    assert "unreachable" in result.output and "Retry" not in result.output
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
