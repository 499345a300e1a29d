"""Where a model normalizes, read from one forward of its blocks, never from its name: per block,

- pre:  a norm's output is what a sub-layer reads (LLaMA, GPT-2, LayerNorm Scaling's scaled norm too);
- post: the block's output is a norm's output, the residual sum normalized (BERT, DeepNorm);
- peri: a norm reads a sub-layer's output before the residual add (Gemma 3, sandwich), beside the input norms;
- unknown: none of these shows.

A model whose blocks differ between pre and post (Mix-LN) is `mix`. Tensors are compared by direction (cosine
per token), so a scaled norm (LNS) or a scaled residual (DeepNorm) reads as its placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerprobe.errors import ArchitectureError
from layerprobe.hook_owner import Hooks, owned_hooks
from layerprobe.models.layers import BlockStack, find_sublayer

PLACEMENT_NAMES = ("pre", "post", "peri", "mix", "unknown")


@dataclass
class _Seen:
    """The first call's input and output of each watched module, by id."""

    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)

    def watch(self, module: Any, hooks: Hooks) -> None:
        def before(mod, args, kwargs):
            self.inputs.setdefault(id(mod), args[0] if args else kwargs.get("hidden_states"))

        def after(mod, args, output):
            self.outputs.setdefault(id(mod), output[0] if isinstance(output, (tuple, list)) else output)

        hooks.add(module.register_forward_pre_hook(before, with_kwargs=True))
        hooks.add(module.register_forward_hook(after))


def _same_direction(a: Any, b: Any) -> bool:
    """Every token's vector of a points as b's (a scale apart at most)."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    cos = torch.nn.functional.cosine_similarity(a.double().flatten(0, -2), b.double().flatten(0, -2), dim=-1)
    return bool((cos > 1 - 1e-6).all())


def _norms(block: Any) -> list:
    return [m for _, m in block.named_modules() if "norm" in type(m).__name__.lower() and m is not block]


def _sublayers(model: Any, block: Any) -> list:
    found = []
    for part in ("attn", "mlp"):
        try:
            found.append(find_sublayer(model, block, part).module)
        except ArchitectureError:
            continue
    return found


def block_placements(model: Any, stack: BlockStack) -> list[str]:
    """pre, post, peri or unknown for each block, from one forward of eight tokens (hooks removed in finally)."""
    import torch

    seen = _Seen()
    with owned_hooks() as hooks:
        for block in stack.blocks:
            for module in (block, *_norms(block), *_sublayers(model, block)):
                seen.watch(module, hooks)
        device = next(model.parameters()).device
        ids = torch.arange(5, 13, device=device).unsqueeze(0)
        with torch.inference_mode():
            model(input_ids=ids)
    return [_classify(seen, block, _norms(block), _sublayers(model, block)) for block in stack.blocks]


def _classify(seen: _Seen, block: Any, norms: list, sublayers: list) -> str:
    out = seen.outputs.get(id(block))
    norm_out = [seen.outputs.get(id(n)) for n in norms]
    norm_in = [seen.inputs.get(id(n)) for n in norms]
    post = any(_same_direction(out, o) for o in norm_out)
    peri = any(_same_direction(i, seen.outputs.get(id(s))) for i in norm_in for s in sublayers)
    pre = any(_same_direction(seen.inputs.get(id(s)), o) for s in sublayers for o in norm_out)
    if peri and pre:
        return "peri"
    if post:  # the residual stream itself is normalized (the next sub-layer may read that same norm's output)
        return "post"
    return "pre" if pre else "unknown"


def model_placement(per_block: list[str]) -> str:
    """One word for the model: the blocks' common placement, mix for Pre-LN and Post-LN blocks together."""
    kinds = set(per_block)
    if len(kinds) == 1:
        return per_block[0]
    return "mix" if kinds == {"pre", "post"} else "unknown"
