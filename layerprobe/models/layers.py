"""find_blocks(model) -> BlockStack: the one place that knows where architectures keep their blocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerprobe.errors import ArchitectureError
from layerprobe.config import STACKS  # declared once, with the settings that take it

# Attribute names that hold the block stack in the architectures we know (the path's last part):
#   LLaMA/Qwen2/Mistral/Gemma/Phi-3/OPT/GPT-NeoX/in-house `...layers`, BERT/RoBERTa `encoder.layer`,
#   GPT-2/GPT-J/Falcon/BLOOM `transformer.h`, MPT `transformer.blocks`, T5 `block`.
KNOWN_STACK_NAMES = ("layers", "layer", "h", "blocks", "block")
# Models with several stacks (--stack): a path's words name its stack; the others are the language model.
STACK_WORDS = (("vision", {"vision", "visual", "image"}), ("encoder", {"encoder"}), ("decoder", {"decoder"}))
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
# and `output`; BLOOM): (module, the forward argument that carries the residual, the path inside the module of the
# branch f whose output is added). Two ways to remove such a sub-layer (--sublayer): `branch` zeroes f's output and
# keeps the module's norm (Post-LN: LayerNorm(x + 0)); `module` returns the residual argument (output = x, the norm
# skipped too).
_BERT_LIKE = {"attn": ("attention", "hidden_states", "output.dense"), "mlp": ("output", "input_tensor", "dense")}
RESIDUAL_INSIDE = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "camembert", "electra", "deberta", "deberta-v2",
                     "megatron-bert", "ernie"), _BERT_LIKE),
    "mpnet": {"attn": ("attention", "hidden_states", "attn"), "mlp": ("output", "input_tensor", "dense")},
    "bloom": {"attn": ("self_attention", "residual", "dense"), "mlp": ("mlp", "residual", "dense_4h_to_h")},
}


@dataclass
class Sublayer:
    """Where one sub-layer of a block lives and how to remove it."""

    module: Any  # the nn.Module the sub-layer is
    residual_arg: str | None  # None: the module is the branch; else the forward argument that carries the residual
    branch: Any  # the nn.Module whose output the block adds to its residual stream (the module itself, or inside it)


def find_sublayer(model: Any, block: Any, part: str) -> Sublayer:
    """The attention (part='attn') or MLP ('mlp') sub-layer of a block, from the table above."""
    import torch.nn as nn

    model_type = getattr(text_config(model), "model_type", None)
    inside = RESIDUAL_INSIDE.get(model_type, {}).get(part)
    names = (inside[0],) if inside else SUBLAYER_NAMES[part]
    for name in names:
        module = getattr(block, name, None)
        if isinstance(module, nn.Module):
            branch = get_module(module, inside[2]) if inside else module
            return Sublayer(module, inside[1] if inside else None, branch)
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
    sublayer: str = "branch"  # how --part attn|mlp removes a sub-layer: branch or module (RESIDUAL_INSIDE above)

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
    """Every ModuleList that can be a block stack: (path, list, parameter count). Its children share one class, or,
    in hybrids (Jamba: attention and Mamba layers), it holds one block per layer of the text config under a known
    stack name."""
    import torch.nn as nn

    layers = getattr(text_config(model), "num_hidden_layers", None)
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            kinds = {type(child) for child in module}
            hybrid = name.split(".")[-1] in KNOWN_STACK_NAMES and len(module) == layers
            if len(kinds) == 1 or hybrid:
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


def stack_name(path: str) -> str:
    """Which stack a block list is, by the words of its path: vision, encoder, decoder, else language."""
    words = set(path.lower().replace("_", ".").split("."))
    for name, marks in STACK_WORDS:
        if words & marks:
            return name
    return "language"


def find_stacks(model: Any) -> dict[str, tuple[str, Any]]:
    """name -> (path, ModuleList) of every block stack under a known name: encoder and decoder of encoder-decoders,
    language and vision of vision-language models, one entry for the others. Per name, the largest list wins."""
    best: dict[str, tuple[str, Any, int]] = {}
    for path, blocks, params in _candidates(model):
        if path.split(".")[-1] in KNOWN_STACK_NAMES:
            name = stack_name(path)
            if name not in best or (params, len(blocks)) > (best[name][2], len(best[name][1])):
                best[name] = (path, blocks, params)
    return {name: (path, blocks) for name, (path, blocks, _) in sorted(best.items())}


def describe_stacks(stacks: dict[str, tuple[str, Any]]) -> str:
    return ", ".join(f"{name} ({path}, {len(blocks)} layers)" for name, (path, blocks) in stacks.items())


def default_stack(model: Any, stacks: dict[str, tuple[str, Any]]) -> str | None:
    """The stack measured without --stack: the only one, else a vision-language model's language model; None when
    the choice is the user's (an encoder-decoder)."""
    if len(stacks) == 1:
        return next(iter(stacks))
    return "language" if "language" in stacks else None


def find_blocks(model: Any, layers_path: str | None = None, stack: str | None = None) -> BlockStack:
    """Locate the stack of transformer blocks: by --layers-path, by --stack (encoder, decoder, language, vision), or
    by name and size."""
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
        stacks = find_stacks(model)
        if stack is not None or len(stacks) > 1:
            path, blocks = _pick_stack(model, stacks, stack)
        else:
            pool = list(stacks.values()) or [(path, blocks) for path, blocks, _ in _candidates(model)]
            if not pool:
                raise ArchitectureError(
                    f"No stack of identical transformer blocks found in {type(model).__name__}: pass "
                    f"--layers-path; ModuleLists in the model: {_describe_lists(model)}."
                )
            # The dominant stack: the one holding the most parameters.
            path, blocks = max(pool, key=lambda c: (sum(p.numel() for p in c[1].parameters()), len(c[1])))
    parent_path, _, attr = path.rpartition(".")
    parent = get_module(model, parent_path) if parent_path else model
    return BlockStack(path=path, parent=parent, attr=attr, blocks=blocks)


def _pick_stack(model: Any, stacks: dict[str, tuple[str, Any]], stack: str | None) -> tuple[str, Any]:
    name = stack or default_stack(model, stacks)
    if name is None:
        raise ArchitectureError(f"{type(model).__name__} has several block stacks: {describe_stacks(stacks)}; pass "
                                f"--stack {' or --stack '.join(stacks)}.")
    if name not in stacks:
        raise ArchitectureError(f"--stack {name}: {type(model).__name__} has no such stack; its stacks are "
                                f"{describe_stacks(stacks) or 'none'}: pass one of them, or --layers-path.")
    return stacks[name]


# Encoder-decoders count each stack's layers in a field of its own (T5: num_layers / num_decoder_layers, BART:
# encoder_layers / decoder_layers); everything else counts the blocks in num_hidden_layers (of the text config).
STACK_COUNT_FIELDS = {"encoder": ("num_layers", "encoder_layers"), "decoder": ("num_decoder_layers", "decoder_layers")}


def layer_count_field(model: Any, stack: BlockStack) -> str:
    """The config field that counts the blocks of `stack` (what an export with fewer blocks must change)."""
    config = text_config(model)
    if getattr(config, "is_encoder_decoder", False):
        for name in STACK_COUNT_FIELDS.get(stack_name(stack.path), ()):
            if name in vars(config):
                return name
    return "num_hidden_layers"


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
    paths = [path for path, _ in find_stacks(model).values()]
    embeddings = model.get_input_embeddings()
    embedding_path = next((n for n, m in model.named_modules() if m is embeddings), None)
    prefixes = tuple(f"{p}." for p in (*paths, embedding_path) if p)
    return [n for n in names if n.startswith(prefixes)]


# Per-layer kind lists of the text config, first found wins: Jamba/Falcon-H1/Bamba `layers_block_type` (attention,
# mamba), then transformers' `layer_types` (full/sliding attention; linear_attention for every recurrent kind).
LAYER_KIND_FIELDS = ("layers_block_type", "layer_types")
_CLASS_KINDS = (("mamba", "mamba"), ("rwkv", "rwkv"))  # a block class that names its recurrent kind


def layer_kinds(model: Any, stack: BlockStack) -> list[str]:
    """The kind of each block: the config's per-layer list where it has one (a hybrid's attention and Mamba
    layers), a recurrent kind named by the block's class (Mamba-2's blocks), else 'attention'."""
    config = text_config(model)
    listed = None
    for name in LAYER_KIND_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)) and len(value) == len(stack):
            listed = [str(v) for v in value]
            break
    kinds = []
    for index, block in enumerate(stack.blocks):
        lowered = type(block).__name__.lower()
        named = next((kind for mark, kind in _CLASS_KINDS if mark in lowered), None)
        kind = listed[index] if listed else "attention"
        kinds.append(named if named and kind in ("linear_attention", "attention") else kind)
    return kinds


def kind_marks(kinds: list[str]) -> dict[str, str]:
    """kind -> the short mark a plot's tick labels carry (A attention, M mamba, ...), unique per kind."""
    marks: dict[str, str] = {}
    for kind in dict.fromkeys(kinds):
        words = [w for w in kind.replace("-", "_").split("_") if w]
        mark = "".join(w[0] for w in words).upper() or "?"
        while mark in marks.values():
            mark += "'"
        marks[kind] = mark
    return marks


# Linear layers peft can adapt: torch's own, and GPT-2's transposed Conv1D (transformers.pytorch_utils)
LINEAR_CLASSES = ("Linear", "Conv1D")


def projections(model: Any, stack: BlockStack) -> dict[str, list[str]]:
    """The linear projections of every block's attention and MLP sub-layers (LoRA's usual targets): their own name
    (q_proj, down_proj, c_attn, ...) -> the dotted path of each from the model root, in block order."""
    names = {id(m): n for n, m in model.named_modules()}
    found: dict[str, list[str]] = {}
    for block in stack.blocks:
        for part in ("attn", "mlp"):
            for module in _part_modules(model, block, part):
                if type(module).__name__ in LINEAR_CLASSES and id(module) in names:
                    path = names[id(module)]
                    found.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    return {name: list(dict.fromkeys(paths)) for name, paths in found.items()}


def _part_modules(model: Any, block: Any, part: str) -> list:
    """Every module of a block's attention or MLP sub-layer; an MLP with no module of its own (OPT's fc1, fc2 on the
    block itself) is the block's direct children outside its attention."""
    try:
        return list(find_sublayer(model, block, part).module.modules())
    except ArchitectureError:
        if part != "mlp":
            raise
    attention = {id(m) for m in find_sublayer(model, block, "attn").module.modules()}
    return [m for m in block.children() if id(m) not in attention]


# ---- where a block's MLP output is made (training-free repair folds a linear map into it: heal --method lstsq) ----
# The projection whose output the block adds to its residual stream, inside the MLP sub-layer, first found wins:
# LLaMA/Qwen2/Mistral/Gemma/Phi-3 `down_proj`, GPT-2 `c_proj`, OPT/Phi `fc2`, GPT-J `fc_out`, GPT-NeoX/Falcon
# `dense_4h_to_h`, older Mixtral experts `w2`. (RESIDUAL_INSIDE families: their `branch`.)
DOWN_PROJECTIONS = ("down_proj", "c_proj", "fc2", "fc_out", "dense_4h_to_h", "w2")
# Norms on the MLP's output before the residual add (Gemma 2/3 and OLMo 2 `post_feedforward_layernorm`, GLM-4
# `post_mlp_layernorm`): a linear map folded into the down-projection would pass through them, so no fold is exact.
POST_MLP_NORMS = ("post_feedforward_layernorm", "post_mlp_layernorm", "ffn_post_norm")
# Scales a block applies to its MLP's output after the projection, before the residual add (config fields; Granite's
# `residual_multiplier`: x + r * mlp(x)). The repair's m is what the block adds, r times the projection's output, so
# a map T folded into the projection gives r (y T) = m T exactly. A scale missing here is caught by the fold's check
# (repair/replace.py verify_folds), which refuses, never saves, an inexact fold.
OUTPUT_SCALES = ("residual_multiplier",)
# Families with a norm after the residual add (Post-LN): the block's output is LayerNorm(x + f(x)).
POST_LN_TYPES = frozenset(RESIDUAL_INSIDE) - {"bloom"}  # BLOOM adds its residual inside `mlp`, but is Pre-LN
# Config flags that make a family Post-LN (OPT's do_layer_norm_before=False, as OPT-350m): flag -> the Post-LN value
POST_LN_FLAGS = {"do_layer_norm_before": False}
# Linear layers that store their weight as (in, out) (GPT-2's Conv1D); torch's Linear stores (out, in).
TRANSPOSED_LINEARS = ("Conv1D",)
# The in-house family's placements whose block output is x + attn + mlp exactly (models/placement.py).
PLAIN_RESIDUAL_PLACEMENTS = ("pre", "lns")


def fold_target(model: Any, stack: BlockStack, index: int) -> Any:
    """The linear module whose output block `index` adds to its residual stream as its MLP's update (m), where a map
    T folded into its weight gives exactly m T; an ArchitectureError naming why where no such fold is exact."""
    if index < 0:
        raise ArchitectureError("Block 0 is removed and has no block before it whose MLP output could carry the "
                                "replacement: keep block 0 (remove from 1 on), or use --method lora or tail.")
    config = text_config(model)
    model_type = getattr(config, "model_type", None)
    if model_type in POST_LN_TYPES or any(getattr(config, k, None) is v for k, v in POST_LN_FLAGS.items()):
        raise ArchitectureError(f"{model_type} is Post-LN (a LayerNorm after each residual add), so a map folded into "
                                "an MLP's output projection is not applied as fitted: use --method lora or tail.")
    placement = getattr(config, "placement", None)
    if callable(placement) and placement(index, len(stack)) not in PLAIN_RESIDUAL_PLACEMENTS:
        raise ArchitectureError(f"Block {index} uses the {placement(index, len(stack))} norm placement (a norm between "
                                "its MLP and the next block's input), so no fold is exact: use --method lora or tail.")
    block = stack.blocks[index]
    norm = next((name for name in POST_MLP_NORMS if hasattr(block, name)), None)
    if norm:
        raise ArchitectureError(f"Block {index} normalizes its MLP output ({norm}) before the residual add (Peri-LN), "
                                "so a map folded into its down-projection is not applied as fitted: use --method lora "
                                "or tail.")
    try:
        sublayer = find_sublayer(model, block, "mlp")
    except ArchitectureError:  # no MLP module: its projections on the block itself (OPT's fc1, fc2), or none
        sublayer = Sublayer(block, None, block)
    if hasattr(sublayer.module, "experts"):
        raise ArchitectureError(f"Block {index}, before the removed blocks, is a mixture of experts: its MLP output is a "
                                "routed sum with no single down-projection to fold into: remove other blocks, or use "
                                "--method lora or tail.")
    found = sublayer.branch if sublayer.residual_arg else next(
        (getattr(sublayer.module, name) for name in DOWN_PROJECTIONS if hasattr(sublayer.module, name)), None)
    if found is None or type(found).__name__ not in LINEAR_CLASSES:
        raise ArchitectureError(f"Block {index}'s MLP ({type(sublayer.module).__name__}) has no output projection "
                                f"layerprobe knows (looked for {', '.join(DOWN_PROJECTIONS)}): use --method lora or "
                                "tail.")
    return found


def output_scale(model: Any) -> float:
    """The factor a block applies to its MLP projection's output before adding it (OUTPUT_SCALES; 1.0 for most)."""
    config, scale = text_config(model), 1.0
    for name in OUTPUT_SCALES:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            scale *= float(value)
    return scale


def weight_is_transposed(linear: Any) -> bool:
    """True where the module computes x @ weight (weight (in, out)), False for x @ weight.T (torch's Linear)."""
    return type(linear).__name__ in TRANSPOSED_LINEARS
