"""The local corpus readers (.txt, .jsonl, .parquet, a datasets folder) give the same documents. Moved from
tests/unit/test_data.py (issue 52 item 7): writing the datasets folder imports datasets, which the unit tier does not."""

from __future__ import annotations

import json

from layerprobe.data.corpora import open_corpus

from .unit.test_data import DOCS


def test_readers_agree(tmp_path):
    import datasets
    import pandas as pd

    (tmp_path / "c.txt").write_text("\n\n".join(DOCS) + "\n\n\n")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(DOCS)))
    pd.DataFrame({"body": DOCS}).to_parquet(tmp_path / "c.parquet")
    datasets.Dataset.from_dict({"text": DOCS}).save_to_disk(str(tmp_path / "disk"))
    assert list(open_corpus(str(tmp_path / "c.txt")).texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "c.jsonl")).texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "c.parquet"), text_field="body").texts()) == DOCS
    assert list(open_corpus(str(tmp_path / "disk")).texts()) == DOCS
