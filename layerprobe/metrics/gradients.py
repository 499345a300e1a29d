"""Per-block gradient norms (of the parameters, whole and per sub-module, and of the input) and output variance."""

from __future__ import annotations

from typing import Any

import torch

from layerprobe.models.layers import submodule_kind


def parameter_grad_norms(block: Any) -> dict[str, float]:
    """L2 norm of the gradient of all the block's parameters ('block') and per 'attn' / 'mlp' / 'norm'."""
    squares: dict[str, float] = {"block": 0.0}
    for name, param in block.named_parameters():
        if param.grad is None:
            continue
        value = float(param.grad.detach().double().pow(2).sum())
        squares["block"] += value
        kind = submodule_kind(name)
        squares[kind] = squares.get(kind, 0.0) + value
    return {k: v**0.5 for k, v in squares.items()}


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
