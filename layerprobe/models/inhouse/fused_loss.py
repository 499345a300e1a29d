"""Causal-LM loss through the LM head without the (tokens, vocab) logits tensor or its log-softmax backward.

The head and the cross-entropy are one autograd function: rows go through in chunks, and each chunk's gradient
(softmax - one-hot) is turned into the gradient of the hidden state (and of the head weight, when it trains)
right away. Same loss and gradients as F.cross_entropy(hidden @ W^T, target, ignore_index=-100); the memory of
the logits is one chunk's, and the logits are read and written about half as often (this is a large part of a
CPU pass of a small model with a 30K vocabulary).
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 256  # (256, vocab) float32 logits at a time: 31 MB at a 30K vocabulary, below MMAP_THRESHOLD (memory.py)


class LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # hidden (rows, d), weight (vocab, d), target (rows,) with -100 = ignored
        compute = torch.promote_types(hidden.dtype, torch.float32)  # bf16 models: softmax in float32
        valid = target != -100
        count = int(valid.sum())
        grad_hidden = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=compute) if weight.requires_grad else None
        total = torch.zeros((), dtype=torch.float64, device=hidden.device)
        for start in range(0, hidden.shape[0], CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            keep = valid[rows]
            whole = bool(keep.all())
            if not whole and not bool(keep.any()):
                continue
            h = hidden[rows] if whole else hidden[rows][keep]  # (n, d)
            t = target[rows] if whole else target[rows][keep]  # (n,)
            logits = (h @ weight.T).to(compute)  # (n, vocab)
            lse = torch.logsumexp(logits, dim=-1)  # (n,)
            total += (lse - logits.gather(1, t[:, None]).squeeze(1)).double().sum()
            # d(mean loss)/d(logits) = (softmax - onehot) / count, computed in place of the logits
            grad = logits.sub_(lse[:, None]).exp_()
            grad[torch.arange(len(t), device=t.device), t] -= 1.0
            grad = grad.mul_(1.0 / count).to(weight.dtype)
            part = (grad @ weight).to(hidden.dtype)  # (n, d)
            if whole:
                grad_hidden[rows] = part
            else:
                grad_hidden.index_copy_(0, torch.nonzero(keep).squeeze(1) + start, part)
            if grad_weight is not None:
                grad_weight += (grad.T @ h).to(compute)
        ctx.save_for_backward(grad_hidden, grad_weight if grad_weight is not None else torch.empty(0))
        ctx.weight_dtype = weight.dtype if grad_weight is not None else None
        if count == 0:
            return torch.full((), float("nan"), dtype=compute, device=hidden.device)
        return (total / count).to(compute)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        weight_part = (grad_weight * grad_loss).to(ctx.weight_dtype) if ctx.weight_dtype is not None else None
        return grad_hidden * grad_loss.to(grad_hidden.dtype), weight_part, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of softmax(hidden @ weight^T) against target (-100 ignored); hidden (..., d)."""
    return LinearCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1))
