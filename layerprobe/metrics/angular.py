"""Angular distance d(x_l, x_{l+n}) = arccos(cos)/pi between block inputs, streamed in float64."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Token rows converted to float64 at a time: bounds the extra memory to CHUNK x (L+1) x d doubles.
CHUNK_TOKENS = 4096


def cosine_gram(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, K, d) float64 -> cosines (tokens, K, K) clamped to [-1, 1], squared norms (tokens, K).

    One batched matmul gives every pair's dot product; no T x T similarity matrix is ever formed.
    """
    gram = torch.bmm(x, x.transpose(1, 2))  # (tokens, K, K)
    sq = gram.diagonal(dim1=1, dim2=2)  # (tokens, K)
    norms = sq.clamp_min(1e-300).sqrt()
    return (gram / (norms[:, :, None] * norms[:, None, :])).clamp(-1.0, 1.0), sq


@dataclass
class AngularStats:
    """Means over tokens of the K = L+1 block inputs/outputs x_0..x_L."""

    distance: torch.Tensor  # (K, K) float64: mean d(x_i, x_j), symmetric, zero diagonal
    norm: torch.Tensor  # (K,) mean L2 norm of x_l
    variance: torch.Tensor  # (K,) mean per-token variance of x_l over hidden units
    cos_input: torch.Tensor  # (K,) mean cosine of x_l with x_0
    tokens: int
    cos_next: torch.Tensor | None = None  # (K-1,) mean cosine of x_l with x_{l+1}: Block Influence = 1 - cos_next


class AngularAccumulator:
    """Running float64 sums over tokens; memory does not grow with the number of tokens."""

    def __init__(self, num_states: int, device: torch.device | str = "cpu") -> None:
        k = num_states
        self.num_states = k
        self.dist_sum = torch.zeros(k, k, dtype=torch.float64, device=device)
        self.norm_sum = torch.zeros(k, dtype=torch.float64, device=device)
        self.var_sum = torch.zeros(k, dtype=torch.float64, device=device)
        self.cos0_sum = torch.zeros(k, dtype=torch.float64, device=device)
        self.cos_next_sum = torch.zeros(k - 1, dtype=torch.float64, device=device)
        self.tokens = 0
        self._scratch: torch.Tensor | None = None

    def update(self, states: list[torch.Tensor], rows: torch.Tensor | None = None) -> None:
        """Add tokens from K hidden states of shape (batch, seq, d); rows picks flat token indices."""
        d = states[0].shape[-1]
        flat = [s.reshape(-1, d) for s in states]  # K x (batch*seq, d), views
        count = flat[0].shape[0]
        if rows is not None and rows.numel() == count:
            rows = None  # every token: slice instead of gathering
        total = count if rows is None else rows.numel()
        for start in range(0, total, CHUNK_TOKENS):
            t = min(CHUNK_TOKENS, total - start)
            x = self._buffer(t, d, self.dist_sum.device)  # (t, K, d) float64, reused across batches
            for k, f in enumerate(flat):
                # One converting copy per state: no float32 stack, no separate float64 cast.
                # States may sit on several devices (accelerate device map): the copy gathers them on x's.
                x[:, k].copy_(f[start : start + t] if rows is None
                              else f.index_select(0, rows[start : start + t].to(f.device)))
            cos, sq = cosine_gram(x)  # (t, K, K), (t, K)
            self.dist_sum += torch.arccos(cos).sum(0) / math.pi
            self.cos0_sum += cos[:, :, 0].sum(0)
            self.cos_next_sum += cos.diagonal(offset=1, dim1=1, dim2=2).sum(0)
            self.norm_sum += sq.sqrt().sum(0)
            mean = x.mean(-1)  # (t, K)
            self.var_sum += (sq / d - mean * mean).sum(0)
            self.tokens += t

    def _buffer(self, t: int, d: int, device: torch.device) -> torch.Tensor:
        buffer = self._scratch
        if buffer is None or buffer.shape[0] < t or buffer.shape[2] != d or buffer.device != device:
            buffer = torch.empty(t, self.num_states, d, dtype=torch.float64, device=device)
            self._scratch = buffer
        return buffer[:t]

    def state(self) -> torch.Tensor:
        """All sums in one flat float64 vector (for an all-reduce across processes)."""
        count = torch.tensor([float(self.tokens)], dtype=torch.float64, device=self.dist_sum.device)
        return torch.cat([self.dist_sum.flatten(), self.norm_sum, self.var_sum, self.cos0_sum, self.cos_next_sum,
                          count])

    def load_state(self, flat: torch.Tensor) -> None:
        k = self.num_states
        if flat.numel() != k * k + 4 * k:
            raise ValueError(f"saved sums hold {flat.numel()} values, not the {k * k + 4 * k} of {k} states")
        flat = flat.to(self.dist_sum.device)
        self.dist_sum = flat[: k * k].view(k, k).clone()
        self.norm_sum, self.var_sum, self.cos0_sum = (flat[k * k + i * k : k * k + (i + 1) * k].clone() for i in range(3))
        self.cos_next_sum = flat[k * k + 3 * k : k * k + 4 * k - 1].clone()
        self.tokens = int(flat[-1].item())

    def result(self) -> AngularStats:
        n = max(self.tokens, 1)
        return AngularStats(
            distance=(self.dist_sum / n).cpu(),
            norm=(self.norm_sum / n).cpu(),
            variance=(self.var_sum / n).cpu(),
            cos_input=(self.cos0_sum / n).cpu(),
            tokens=self.tokens,
            cos_next=(self.cos_next_sum / n).cpu(),
        )
