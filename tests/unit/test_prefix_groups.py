"""Which rows share a few-shot prefix (evaluation/prefix_cache.py), on hand-made token id sequences."""

from __future__ import annotations

from types import SimpleNamespace

from layerprobe.evaluation.prefix_cache import common_length, fed, prefix_groups, support

SHOTS_A = list(range(100, 140))  # 40 tokens of one subject's few-shot block
SHOTS_B = list(range(100, 110)) + list(range(300, 330))  # another subject: the first 10 tokens are the same


def test_rows_group_by_their_common_prefix_of_token_ids():
    rows = [SHOTS_A + [1, 2, 3], SHOTS_B + [7, 8], SHOTS_A + [1, 5], SHOTS_B + [9], [5, 6, 7], SHOTS_A + [4]]
    groups, loose = prefix_groups(rows, [len(r) - 1 for r in rows], min_prefix=32)
    # row 0 and 2 share 41 tokens, 5 only 40: the group's prefix is the 40 all three share
    assert groups == [(40, [0, 2, 5]), (40, [1, 3])] and loose == [4]


def test_the_prefix_ends_before_every_scored_position():
    rows = [SHOTS_A + [1, 2, 3], SHOTS_A + [1, 2, 4]]
    assert prefix_groups(rows, [41, 43])[0] == [(41, [0, 1])]  # row 0 scores from position 41 on
    assert prefix_groups(rows, [20, 43]) == ([], [0, 1])  # too short a prefix left: scored whole


def test_groups_do_not_depend_on_the_other_rows():
    """A resumed pass scores fewer rows: the groups of those left are the same (lexicographic runs)."""
    rows = [SHOTS_A + [1], SHOTS_A + [2], SHOTS_B + [1], SHOTS_B + [2], SHOTS_A[:20] + [0] * 30]
    whole, _ = prefix_groups(rows, [len(r) - 1 for r in rows])
    left = rows[2:]
    part, _ = prefix_groups(left, [len(r) - 1 for r in left])
    assert [(n, [i + 2 for i in members]) for n, members in part] == [g for g in whole if g[1][0] >= 2]


def test_fed_tokens_are_hflms():
    assert fed([1, 2, 3], [4, 5], 10) == [1, 2, 3, 4]  # the last continuation token is never fed
    assert fed([1, 2, 3], [4, 5], 3) == [2, 3, 4]  # left-truncated to max_length + 1, then the last dropped
    assert common_length([1, 2, 3], [1, 2, 4, 5]) == 2 and common_length([1], [1, 2]) == 1


def test_support_names_why_a_cache_cannot_be_split():
    def model(module, **config):
        fake = type("M", (), {"__module__": module})()
        fake.config = SimpleNamespace(**config)
        return fake

    llama = "transformers.models.llama.modeling_llama"
    assert support(model(llama, model_type="llama", layer_types=["full_attention"] * 2)) is None
    assert "encoder" in support(model("transformers.models.bert.modeling_bert", model_type="bert"))
    assert "custom" in support(model("layerprobe.models.inhouse.modeling", model_type="probe_llama"))
    assert "sliding" in support(model(llama, model_type="x", layer_types=["sliding_attention", "full_attention"]))
    assert "sliding" in support(model(llama, model_type="mistral", sliding_window=4096))
    assert support(model(llama, model_type="qwen2", sliding_window=4096, use_sliding_window=False)) is None
