"""Impossible token counts: one position has no next-token target; every command reading a corpus refuses fewer
than two positions naming the option, from the CLI and the library."""

from __future__ import annotations


import pytest

import layerprobe
from layerprobe import LayerprobeError
from tests.helpers import assert_error, invoke
from tests.every_command import RUNS, TINY


# ---- impossible token counts: one position has no next-token target ------------------------------------------------

def _with(args: list, option: str, value: str) -> list:
    args = list(args)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


@pytest.mark.parametrize("command", ["angular", "prune", "curve", "heal", "gradnorm", "ppl", "drift"])
def test_fewer_than_two_positions_are_refused_naming_the_option(command, model_dirs, tmp_path):
    """Every command reading a corpus: --tokens 1 (ppl 1.0 and an invented ranking) or --seq-len 1 is one line
    naming the option and the minimum, before the model loads; the library and the training callback alike."""
    base = {"ppl": ["prune", "{model}", "--task", "ppl", *TINY], "drift": ["prune", "{model}", "--task", "drift",
                                                                        *TINY]}.get(command) or RUNS[command]
    base = [a.format(model=model_dirs["llama"]) for a in base] + ["--out", str(tmp_path / "run")]
    options = ["--seq-len"] if command == "gradnorm" else ["--tokens", "--seq-len"]
    for option in options:
        for value in ("1", "0"):
            assert_error(invoke(*_with(base, option, value)), f"{option} must be at least 2, got {value}")
    assert not (tmp_path / "run").exists()


def test_the_library_refuses_fewer_than_two_positions(tmp_path):
    from layerprobe import AngularConfig, DataOptions, ModelOptions, PruneConfig

    model = ModelOptions(str(tmp_path / "no-such-model"))
    for data in (DataOptions("builtin", tokens=1), DataOptions("builtin", seq_len=1)):
        with pytest.raises(LayerprobeError, match="must be at least 2"):
            layerprobe.angular(AngularConfig(model=model, data=data))
        with pytest.raises(LayerprobeError, match="must be at least 2"):
            layerprobe.prune(PruneConfig(model=model, data=data, task="ppl"))
    with pytest.raises(LayerprobeError, match="tokens must be at least 2"):
        layerprobe.LayerMonitor(None, None, tokens=1)


def test_a_last_sequence_without_a_target_costs_no_interval():
    """ppl of --tokens 49 at --seq-len 16: the last sequence holds one position, no next-token target; its 0 / 0
    is left out of the records (it adds nothing to the score), so the intervals stay."""
    from layerprobe.evaluation.records import sequence_rows

    rows = sequence_rows("ppl", [[10.0, 15], [12.0, 15], [0.0, 0]])
    assert [(r["doc_id"], r["tokens"], r["total"]) for r in rows] == [(0, 15, 10.0), (1, 15, 12.0)]
