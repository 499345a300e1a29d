"""Normalization placements as one function of (x, F, norm): no transformers import, shared by the in-house
decoder and the toy residual-MLP model."""

from __future__ import annotations

import difflib
from typing import Any

import torch

from layerprobe.errors import ConfigError
from layerprobe.config import PLACEMENTS  # declared once, with the settings that take it



def check_placements(names) -> None:
    """The one check of --norm values (gradnorm, toy, the in-house configs): an unknown name is a one-line error."""
    names = list(names)
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"--norm lists '{name}' twice: list each placement once.")
        if name not in PLACEMENTS:
            close = difflib.get_close_matches(name, PLACEMENTS, n=1)
            hint = f" Did you mean: {close[0]}?" if close else ""
            raise ConfigError(f"Unknown placement '{name}' in --norm: use {', '.join(PLACEMENTS)}.{hint}")


def residual_step(placement: str, x: torch.Tensor, f: Any, norm: Any, out_norm: Any = None, scale: float = 1.0,
                  residual_alpha: float = 1.0) -> torch.Tensor:
    """One residual sub-layer x -> x' around F, in the given placement (mix resolves to pre or post per layer).

    Shared by the in-house decoder (F = attention, then MLP) and the toy residual-MLP model.
    """
    if placement in ("pre", "lns"):
        return x + f(norm(x) * scale)
    if placement in ("post", "deepnorm"):
        return norm(residual_alpha * x + f(x))
    if placement == "sandwich":
        return x + out_norm(f(norm(x)))
    raise ValueError(f"unknown placement {placement}")
