"""merge's summary: the shards' prefix-cache counts summed, the rest taken from the first shard."""

from __future__ import annotations

from layerprobe.commands.prune.merge import summed_prefix_cache


def test_the_shards_compute_counts_are_summed():
    # the two shards of reports/examples/smollm2-prune-mmlu-5shot-limit10, as their own summaries gave them
    one = {"path": "prefix cache", "reason": None, "groups": 57, "rows": 570, "prefix_tokens": 30574, "over_memory": 0,
           "block_tokens": 21245580, "naive_block_tokens": 166694130}
    two = dict(one, block_tokens=19995840, over_memory=1)
    merged = summed_prefix_cache([one, two])
    assert merged["block_tokens"] == 41241420  # 21,245,580 + 19,995,840
    assert merged["naive_block_tokens"] == 333388260  # 2 x 166,694,130
    assert merged["over_memory"] == 1
    assert (merged["groups"], merged["rows"], merged["prefix_tokens"], merged["path"]) == (57, 570, 30574, "prefix cache")
    assert one["block_tokens"] == 21245580  # the shard's own facts are not changed
