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


class TokenSample:
    """The first `size` token vectors of every layer's input, kept on the CPU in float32."""

    def __init__(self, layers: int, size: int) -> None:
        self.size = size
        self.parts: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        self.count = 0

    def add(self, states: list[torch.Tensor], rows: torch.Tensor) -> None:
        """states[l]: (batch, seq, d); rows: flat indices of the measured positions."""
        need = self.size - self.count
        if need <= 0:
            return
        take = rows[:need]
        for layer, state in enumerate(states):
            self.parts[layer].append(state.reshape(-1, state.shape[-1]).index_select(0, take).float().cpu())
        self.count += int(take.numel())

    def effective_ranks(self) -> list[float]:
        return [effective_rank(torch.cat(parts)) if parts else float("nan") for parts in self.parts]
