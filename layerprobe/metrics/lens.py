"""Logit lens: KL(p_L || p_l) between the model's next-token distribution and the one its own final norm and head
read from the block input x_l, summed in float64 over token positions."""

from __future__ import annotations

import torch

# Positions pushed through the head at a time: memory stays at LENS_CHUNK x vocab floats, whatever the vocabulary.
LENS_CHUNK = 256


def kl_rows(final_logits: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    """(positions, V), (positions, V) -> (positions,) float64 KL(softmax(final) || softmax(lens))."""
    log_p = torch.log_softmax(final_logits.double(), dim=-1)
    log_q = torch.log_softmax(lens_logits.double(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


class LensAccumulator:
    """sums[l] = sum over positions of KL(p_L || p_l) for the K = L+1 block inputs x_0..x_L (x_L: the last output)."""

    def __init__(self, num_states: int, limit: int, device: torch.device | str = "cpu") -> None:
        self.sums = torch.zeros(num_states, dtype=torch.float64, device=device)
        self.limit = limit  # positions measured in all
        self.tokens = 0

    def wants(self) -> int:
        return max(self.limit - self.tokens, 0)

    def update(self, head, states: list[torch.Tensor]) -> None:
        """head(x) -> logits for x of shape (positions, d); states: K tensors (positions, d) of the same positions."""
        for start in range(0, states[0].shape[0], LENS_CHUNK):
            final = head(states[-1][start : start + LENS_CHUNK])  # (chunk, V)
            for layer, x in enumerate(states[:-1]):
                self.sums[layer] += kl_rows(final, head(x[start : start + LENS_CHUNK])).sum().to(self.sums.device)
        self.tokens += states[0].shape[0]

    def state(self) -> torch.Tensor:
        return torch.cat([self.sums, torch.tensor([float(self.tokens)], dtype=torch.float64, device=self.sums.device)])

    def load_state(self, flat: torch.Tensor) -> None:
        self.sums, self.tokens = flat[:-1].clone().to(self.sums.device), int(flat[-1].item())

    def result(self) -> torch.Tensor:
        return (self.sums / max(self.tokens, 1)).cpu()
