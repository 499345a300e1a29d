"""Representation statistics shared by the toy model and real checkpoints."""

from __future__ import annotations

import torch


def effective_rank(h: torch.Tensor) -> float:
    """exp(entropy) of the normalized singular values of the centered point cloud h: (samples, width)."""
    centered = h.double() - h.double().mean(0, keepdim=True)
    if centered.shape[0] > 4 * centered.shape[1]:  # many samples: the (width x width) Gram's eigenvalues are faster
        eig = torch.linalg.eigvalsh(centered.T @ centered)
        eig = torch.where(eig > 1e-12 * eig.max(), eig, torch.zeros_like(eig))  # rounding noise of zero directions
        s = eig.sqrt()
    else:
        s = torch.linalg.svdvals(centered)
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))
