"""The HF export's config (issue 50): every per-layer config list of the architecture matrix's families, found here
by its shape (a list as long as the layer count, or a list of layer ids), is cut to the kept layers or absent in the
config the export saves, and transformers' own config loading (its validation) accepts it."""

from __future__ import annotations

import pytest
import torch
import transformers

from .test_matrix import families, stacked_families

KEEP = [0, 3]  # of 4 layers: 1 and 2 removed, as the export test's --remove 1-2
ID_LISTS = ("_layers", "_layer_ids", "_idxs")  # names of lists of layer ids (moe_layers, mlp_only_layers, ...)


def per_layer(config, count: int) -> tuple[dict, dict]:
    """(lists with one entry per layer, lists of layer ids) among a config's own fields, by shape."""
    lists, ids = {}, {}
    for name, value in config.to_dict().items():
        if not isinstance(value, (list, tuple)) or name in ("architectures",):
            continue
        if name.endswith(ID_LISTS) and all(isinstance(v, int) and 0 <= v < count for v in value) \
                and len(value) != count:
            ids[name] = list(value)
        elif len(value) == count:
            lists[name] = list(value)
    return lists, ids


def every_family():
    made = {**families(100, 1, 2), **stacked_families(100, 1, 2)}
    return sorted(made)


@pytest.mark.parametrize("name", every_family())
def test_the_saved_config_cuts_every_per_layer_list(name, tmp_path):
    from layerprobe.models.layers import find_blocks, text_config
    from layerprobe.models.surgery import removed_layers

    make = {**families(100, 1, 2), **stacked_families(100, 1, 2)}[name]
    try:
        made = make()
    except Exception as exc:  # a family this transformers cannot build (as the matrix skips it)
        pytest.skip(f"transformers {transformers.__version__} cannot build {name}: {exc}")
    config, how = made[0], made[1]
    torch.manual_seed(0)
    cls = how if isinstance(how, type) else (transformers.AutoModelForCausalLM if how == "causal"
                                             else transformers.AutoModel)
    model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    stack = find_blocks(model, None, made[2][0][0] if len(made) > 2 else None)  # T5: its encoder, as --stack
    if len(stack) != 4:
        pytest.skip(f"{name}'s default stack has {len(stack)} blocks")
    text = text_config(model)
    lists, ids = per_layer(text, 4)
    with removed_layers(model, [1, 2], stack):
        model.config.save_pretrained(tmp_path)
    reloaded = transformers.AutoConfig.from_pretrained(tmp_path)  # transformers' own validation runs here
    saved = reloaded.get_text_config() if hasattr(reloaded, "get_text_config") else reloaded
    own = saved.to_dict()
    for field, value in lists.items():
        if field in own:
            assert list(own[field]) == [value[i] for i in KEEP], (name, field, own[field])
    for field, value in ids.items():
        if field in own:
            assert list(own[field]) == [KEEP.index(i) for i in value if i in KEEP], (name, field, own[field])
    if hasattr(saved, "validate"):
        saved.validate()
    assert getattr(saved, "num_hidden_layers", 2) == 2
