"""rederive (commands/prune/rederive.py) recomputes a finished run's intervals, decisions and the figure that draws
them from its own records: on a run this layerprobe just wrote, it must give back exactly what the run wrote (the
CSV, the decisions, the figure byte for byte), and on a run whose intervals were damaged, restore them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from layerprobe.commands.prune.rederive import rederive

from .helpers import invoke

DECISIONS = ("significant", "least_important", "most_important", "signal_test", "k_within", "strategy_test")


def common(model_dirs, corpus_file):
    return [str(model_dirs["llama"]), "--dataset", str(corpus_file), "--tokens", "512", "--seq-len", "32",
            "--batch-size", "4", "--device", "cpu"]


@pytest.mark.parametrize("kind", ["prune", "curve"])
def test_rederive_gives_back_what_the_run_wrote_and_restores_damaged_intervals(kind, model_dirs, corpus_file,
                                                                             tmp_path):
    out = tmp_path / kind
    flags = ["--task", "ppl"] if kind == "prune" else ["--task", "kl", "--curve", "--strategies", "last",
                                                        "--max-removed", "2"]
    result = invoke("prune", *common(model_dirs, corpus_file), *flags, "--out", str(out))
    assert result.exit_code == 0, result.output
    table, figure = ("prune.csv", "prune.png") if kind == "prune" else ("curve.csv", "curve.png")
    wrote = {name: (out / name).read_bytes() for name in (table, figure)}
    before = json.loads((out / "summary.json").read_text())
    assert pd.read_csv(out / table)["delta_lo"].notna().any()  # the run has intervals to recompute

    # damage what rederive recomputes: the intervals in the table, and the figure that draws them
    frame = pd.read_csv(out / table)
    frame["delta_lo"], frame["delta_hi"] = frame["delta"] - 99.0, frame["delta"] + 99.0
    frame.to_csv(out / table, index=False)
    (out / figure).write_bytes(b"not the figure")

    after = rederive(out)
    pd.testing.assert_frame_equal(pd.read_csv(out / table), pd.read_csv(pd.io.common.BytesIO(wrote[table])),
                                  check_exact=True)
    assert (out / figure).read_bytes() == wrote[figure]  # drawn again by the run's own function, alike
    for key in DECISIONS:
        assert after.get(key) == before.get(key), key
    assert f"{kind} figure" in after["rederived"]["recomputed"]
