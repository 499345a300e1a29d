"""find_blocks(model) -> BlockStack: the one place that knows where architectures keep their blocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerprobe.errors import ArchitectureError

# Attribute names that hold the block stack in the architectures we know (the path's last part):
#   LLaMA/Qwen2/Mistral/Gemma/Phi-3/OPT/GPT-NeoX/in-house `...layers`, BERT/RoBERTa `encoder.layer`,
#   GPT-2/GPT-J/Falcon/BLOOM `transformer.h`, MPT `transformer.blocks`, T5 `block`.
KNOWN_STACK_NAMES = ("layers", "layer", "h", "blocks", "block")
# Bidirectional encoders: no causal LM objective, no lm-eval generation or loglikelihood tasks.
ENCODER_MODEL_TYPES = {
    "bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
    "mpnet", "camembert", "modernbert", "nomic_bert", "megatron-bert", "ernie",
}

# The sub-layers a block adds to its residual stream (--part attn|mlp), by attribute name, first found wins.
# Removing one replaces its output by zero: the block passes its residual on unchanged through that branch.
SUBLAYER_NAMES = {
    "attn": ("self_attn", "attn", "attention", "self_attention"),
    "mlp": ("mlp", "block_sparse_moe", "feed_forward", "ffn"),
}
# Families whose sub-layer module adds the residual itself (Post-LN BERT: LayerNorm(x + f(x)) inside `attention`
# and `output`; BLOOM): (module, the forward argument that carries the residual); removed, it returns that input.
_BERT_LIKE = {"attn": ("attention", "hidden_states"), "mlp": ("output", "input_tensor")}
RESIDUAL_INSIDE = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "camembert", "electra", "deberta", "deberta-v2", "mpnet",
                     "megatron-bert", "ernie"), _BERT_LIKE),
    "bloom": {"attn": ("self_attention", "residual"), "mlp": ("mlp", "residual")},
}


@dataclass
class Sublayer:
    """Where one sub-layer of a block lives and how to remove it."""

    module: Any  # the nn.Module whose output is replaced
    residual_arg: str | None  # None: output := 0; else output := this forward argument (the residual)


def find_sublayer(model: Any, block: Any, part: str) -> Sublayer:
    """The attention (part='attn') or MLP ('mlp') sub-layer of a block, from the table above."""
    import torch.nn as nn

    model_type = getattr(text_config(model), "model_type", None)
    inside = RESIDUAL_INSIDE.get(model_type, {}).get(part)
    names = (inside[0],) if inside else SUBLAYER_NAMES[part]
    for name in names:
        module = getattr(block, name, None)
        if isinstance(module, nn.Module):
            return Sublayer(module, inside[1] if inside else None)
    children = ", ".join(name for name, _ in block.named_children()) or "none"
    raise ArchitectureError(
        f"--part {part}: {type(block).__name__} ({model_type}) has no {part} sub-layer layerprobe knows (looked for "
        f"{', '.join(names)}; the block has {children}): use --part block."
    )


@dataclass
class BlockStack:
    """The ModuleList of transformer blocks and where it hangs in the model."""

    path: str  # dotted path from the model root, e.g. "model.layers"
    parent: Any  # nn.Module owning the list
    attr: str  # attribute name on parent
    blocks: Any  # nn.ModuleList of identical blocks

    def __len__(self) -> int:
        return len(self.blocks)


def get_module(model: Any, path: str) -> Any:
    """model.a.b.c for path 'a.b.c'; raises ArchitectureError naming the missing part."""
    module = model
    for part in path.split("."):
        if not hasattr(module, part):
            raise ArchitectureError(
                f"--layers-path '{path}' does not exist in {type(model).__name__} (no '{part}'): "
                "pick one of the ModuleLists the model has."
            )
        module = getattr(module, part)
    return module


def _candidates(model: Any) -> list[tuple[str, Any, int]]:
    """Every ModuleList whose children all share one class: (path, list, parameter count)."""
    import torch.nn as nn

    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            kinds = {type(child) for child in module}
            if len(kinds) == 1:
                params = sum(p.numel() for p in module.parameters())
                found.append((name, module, params))
    return found


def _describe_lists(model: Any) -> str:
    import torch.nn as nn

    lists = [
        f"{name} ({len(m)} x {type(m[0]).__name__})" if len(m) else f"{name} (empty)"
        for name, m in model.named_modules()
        if isinstance(m, nn.ModuleList)
    ]
    return ", ".join(lists) if lists else "none"


def find_blocks(model: Any, layers_path: str | None = None) -> BlockStack:
    """Locate the stack of transformer blocks, by --layers-path or by name and size."""
    import torch.nn as nn

    if layers_path:
        prefix = getattr(model, "base_model_prefix", "")
        if prefix and layers_path.startswith(prefix + ".") and not hasattr(model, prefix):
            try:  # 'model.layers' names the same blocks of a bare base model
                get_module(model, layers_path[len(prefix) + 1 :])
                layers_path = layers_path[len(prefix) + 1 :]
            except ArchitectureError:
                pass  # the error below names the path as the user wrote it
        blocks = get_module(model, layers_path)
        if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
            raise ArchitectureError(
                f"--layers-path '{layers_path}' is a {type(blocks).__name__}, not a non-empty ModuleList: "
                f"candidates are {_describe_lists(model)}."
            )
        path = layers_path
    else:
        candidates = _candidates(model)
        named = [c for c in candidates if c[0].split(".")[-1] in KNOWN_STACK_NAMES]
        pool = named or candidates
        if not pool:
            raise ArchitectureError(
                f"No stack of identical transformer blocks found in {type(model).__name__}: pass "
                f"--layers-path; ModuleLists in the model: {_describe_lists(model)}."
            )
        # The dominant stack: the one holding the most parameters.
        path, blocks, _ = max(pool, key=lambda c: (c[2], len(c[1])))
    parent_path, _, attr = path.rpartition(".")
    parent = get_module(model, parent_path) if parent_path else model
    return BlockStack(path=path, parent=parent, attr=attr, blocks=blocks)


def text_config(model: Any) -> Any:
    """The config that counts the blocks (the text config of multimodal models); takes a model or a config."""
    config = getattr(model, "config", model)
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def layer_index_owners(block: Any) -> list[Any]:
    """Sub-modules of a block that carry its position in the stack (`layer_idx`, used by KV caches)."""
    return [m for m in block.modules() if isinstance(getattr(m, "layer_idx", None), int)]


def is_encoder(model: Any) -> bool:
    """True for bidirectional encoders (BERT family)."""
    return getattr(text_config(model), "model_type", None) in ENCODER_MODEL_TYPES


def submodule_kind(name: str) -> str:
    """Group a parameter of a block by its name: 'norm', 'attn' or 'mlp'."""
    lowered = name.lower()
    if "norm" in lowered or lowered.startswith("ln") or ".ln" in lowered:
        return "norm"
    if "attn" in lowered or "attention" in lowered:
        return "attn"
    return "mlp"


def loss_only_kwargs(model: Any) -> dict:
    """Forward keywords that skip the logits when only the loss is needed (the in-house family's fused head)."""
    from layerprobe.models.inhouse.configuration import ProbeLlamaConfig

    return {"return_logits": False} if isinstance(getattr(model, "config", None), ProbeLlamaConfig) else {}


def measured_weights(model: Any, names: list[str]) -> list[str]:
    """Of parameter names of `model`, those the measurements run through: the blocks and the input embeddings
    (a missing one would be randomly initialized and measured; a pooler or a task head is not measured)."""
    try:
        stack_path = find_blocks(model).path
    except ArchitectureError:
        stack_path = None
    embeddings = model.get_input_embeddings()
    embedding_path = next((n for n, m in model.named_modules() if m is embeddings), None)
    prefixes = tuple(f"{p}." for p in (stack_path, embedding_path) if p)
    return [n for n in names if n.startswith(prefixes)]
