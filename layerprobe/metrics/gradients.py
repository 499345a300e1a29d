"""Per-block gradient norms (of the parameters, whole and per sub-module, and of the input) and output variance."""

from __future__ import annotations

from typing import Any

import torch

from layerprobe.hook_owner import HookOwner, Hooks
from layerprobe.models.layers import submodule_kind


class GradSquares(HookOwner):
    """Context manager: per block, the float64 sum of squared parameter gradients ('block' and per 'attn' / 'mlp' /
    'norm'), taken the moment each gradient is complete; the gradient is then dropped.

    No block's gradients outlive its part of the backward pass, so a 7B model needs no second copy of its
    weights for gradients, and each gradient is read once while it is fresh.
    """

    def __init__(self, blocks: Any) -> None:
        self.blocks = list(blocks)
        self.sums: list[dict[str, torch.Tensor]] = []

    def attach(self, hooks: Hooks) -> None:
        self.reset()
        for index, block in enumerate(self.blocks):
            for name, param in block.named_parameters():
                if param.requires_grad:
                    hooks.add(param.register_post_accumulate_grad_hook(self._hook(index, submodule_kind(name))))

    def reset(self) -> None:
        self.sums = [{} for _ in self.blocks]

    def _hook(self, index: int, kind: str):
        def hook(param: torch.Tensor) -> None:
            square = torch.linalg.vector_norm(param.grad, dtype=torch.float64).square()
            sums = self.sums[index]
            for key in ("block", kind):
                sums[key] = sums[key] + square if key in sums else square
            param.grad = None

        return hook

    def norms(self, index: int) -> dict[str, float]:
        """L2 norms of block `index`'s gradients since the last reset: 'block' first, then its sub-modules."""
        return {k: float(v) ** 0.5 for k, v in self.sums[index].items()}


def input_grad_norm(grad: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean over tokens of the per-token L2 norm of dLoss/dx_l; grad: (batch, seq, d)."""
    norms = grad.detach().double().norm(dim=-1)  # (batch, seq)
    if mask is not None:
        return float((norms * mask).sum() / mask.sum())
    return float(norms.mean())


def output_variance(hidden: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean over tokens of the variance across features of a block's output; hidden: (batch, seq, d)."""
    per_token = hidden.detach().double().var(dim=-1, unbiased=False)  # (batch, seq)
    if mask is not None:
        return float((per_token * mask).sum() / mask.sum())
    return float(per_token.mean())


def param_grad_norms(blocks: Any) -> list[float]:
    """L2 norm of each block's parameter gradients as they are now (`.grad` after a backward), summed in float64;
    NaN for a block none of whose parameters holds a gradient. Reads, never changes, the gradients."""
    norms = []
    for block in blocks:
        grads = [p.grad for p in block.parameters() if p.grad is not None]
        if not grads:
            norms.append(float("nan"))
            continue
        square = sum(float(torch.linalg.vector_norm(g.detach(), dtype=torch.float64).square()) for g in grads)
        norms.append(square ** 0.5)
    return norms
