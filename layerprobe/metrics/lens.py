"""Logit lens: KL(p_L || p_l) between the model's next-token distribution and the one its own final norm and head
read from the block input x_l, summed in float64 over token positions."""

from __future__ import annotations

from typing import Callable

import torch

# Positions pushed through the head at a time: memory stays at LENS_CHUNK x vocab floats, whatever the vocabulary.
LENS_CHUNK = 256
# The default number of lens positions. Each position costs one (d x V) head product and a float64 softmax over V
# per block input, far more than a token of the pass when V is large (Gemma 3 270M on a CPU: about 1 s per lens
# position against 0.04 s per token of the pass), so the default shrinks with the vocabulary, LENS_BUDGET / V (512
# up to a 32,768-token vocabulary, 341 for SmolLM2's 49,152, 64 for Gemma 3's 262,144), and with the run,
# 1/LENS_SHARE of its tokens, never below LENS_MIN.
LENS_BUDGET = 512 * 32768
LENS_MAX = 512
LENS_MIN = 16
LENS_SHARE = 64


def default_lens_tokens(vocab_size: int, tokens: int) -> int:
    """Lens positions when --lens-tokens is not given: min(512, 512 x 32768 / V, tokens / 64), at least 16."""
    return max(LENS_MIN, min(LENS_MAX, LENS_BUDGET // max(vocab_size, 1), tokens // LENS_SHARE))


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

    def update(self, head, states: list[torch.Tensor], done: Callable[[int], None] | None = None) -> None:
        """head(x) -> logits for x of shape (positions, d); states: K tensors (positions, d) of the same positions.
        done(positions): called after every layer of every chunk with the positions finished so far, in all
        (a layer's share of a chunk counted as that fraction of its positions), for a progress bar."""
        count = states[0].shape[0]
        for start in range(0, count, LENS_CHUNK):
            final = head(states[-1][start : start + LENS_CHUNK])  # (chunk, V)
            chunk = min(LENS_CHUNK, count - start)
            for layer, x in enumerate(states[:-1]):
                self.sums[layer] += kl_rows(final, head(x[start : start + LENS_CHUNK])).sum().to(self.sums.device)
                if done is not None:
                    done(self.tokens + start + chunk * (layer + 1) // (len(states) - 1))
        self.tokens += count

    def state(self) -> torch.Tensor:
        return torch.cat([self.sums, torch.tensor([float(self.tokens)], dtype=torch.float64, device=self.sums.device)])

    def load_state(self, flat: torch.Tensor) -> None:
        self.sums, self.tokens = flat[:-1].clone().to(self.sums.device), int(flat[-1].item())

    def result(self) -> torch.Tensor:
        return (self.sums / max(self.tokens, 1)).cpu()
