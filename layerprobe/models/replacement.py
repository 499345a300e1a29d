"""Training-free repair of removed blocks (ReplaceMe, Shopkhoev et al. 2025): the update of a removed run of blocks
i..j is replaced by one linear map T (d x d) applied to the MLP output m of block i-1, folded into that MLP's
output projection, so the shortened model computes x_i - m + m T where the removed blocks computed x_{j+1}.

    lstsq:  T = argmin ||m T - (x_{j+1} - x_i + m)||^2 + ridge * s * ||T - I||^2   (float64, s = ||m||_F^2 / d)
    cosine: T = argmin mean_t 1 - cos(m_t T + x_i,t - m_t, x_{j+1},t), full-batch Adam from the lstsq solution

The ridge pulls T towards the identity, i.e. towards plain removal (T = I gives x_i), and is scale-free through s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from layerprobe.hooks import block_hidden
from layerprobe.hook_owner import owned_hooks
from layerprobe.models.layers import weight_is_transposed


def contiguous_runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted block ids -> their maximal runs of consecutive ids, (first, last) each: [3, 4, 7] -> [(3, 4), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for index in sorted(ids):
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


class _Enough(Exception):
    """Raised by the hook after the last block a capture needs: the rest of the forward is not computed."""


@dataclass
class RunActivations:
    """Calibration activations of one removed run, float32 on the CPU, one row per token position: m (the MLP output
    of the block before), x_in (the residual stream entering the run), x_out (leaving it)."""

    m: list = field(default_factory=list)
    x_in: list = field(default_factory=list)
    x_out: list = field(default_factory=list)

    def stacked(self) -> tuple[Any, Any, Any]:
        import torch

        return torch.cat(self.m), torch.cat(self.x_in), torch.cat(self.x_out)


@contextmanager
def capturing(projection: Any, first: Any, last: Any, store: RunActivations, scale: float = 1.0) -> Iterator[None]:
    """Hooks that record, per forward, what the block adds through `projection` (m: its output times `scale`, the
    block's own factor, models/layers.py output_scale), the input of block `first` and the output of block `last` at
    every position; the forward stops after `last`."""
    import torch

    def keep(tensor: Any) -> Any:
        return tensor.detach().reshape(-1, tensor.shape[-1]).float().cpu()  # (batch * seq, d)

    def on_projection(module, args, output):
        store.m.append(keep(output) * scale)

    def on_first(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        store.x_in.append(keep(hidden))

    def on_last(module, args, output):
        store.x_out.append(keep(block_hidden(output)))
        raise _Enough

    with owned_hooks() as hooks, torch.no_grad():
        hooks.add(projection.register_forward_hook(on_projection))
        hooks.add(first.register_forward_pre_hook(on_first, with_kwargs=True))
        hooks.add(last.register_forward_hook(on_last))
        yield


def collect(model: Any, projection: Any, first: Any, last: Any, batches: Any, device: str,
            scale: float = 1.0, tick: Callable[[int], None] | None = None) -> RunActivations:
    """Run the calibration batches (full packed sequences, (batch, seq) each) through the model up to block `last`;
    `tick(n)` after the n-th batch."""
    store = RunActivations()
    with capturing(projection, first, last, store, scale):
        for number, ids in enumerate(batches, 1):
            try:
                model(input_ids=ids.to(device), use_cache=False)
            except _Enough:
                pass
            if tick is not None:
                tick(number)
    return store


def _scale(m: Any) -> float:
    return float((m * m).sum()) / m.shape[1]


def fit_lstsq(m: Any, x_in: Any, x_out: Any, ridge: float = 0.0) -> Any:
    """T (d, d) float64 minimizing ||m T - (x_out - x_in + m)||^2 + ridge * s * ||T - I||^2 (the module's docstring)."""
    import torch

    m64 = m.double().cpu()
    target = (x_out.double() - x_in.double()).cpu() + m64
    if ridge:
        d = m64.shape[1]
        root = (ridge * _scale(m64)) ** 0.5 * torch.eye(d, dtype=torch.float64)
        m64, target = torch.cat([m64, root]), torch.cat([target, root])  # rows sqrt(ridge s) (T - I) = 0
    return torch.linalg.lstsq(m64, target, driver="gelsd").solution


def cosine_loss(T: Any, m: Any, x_in: Any, x_out: Any) -> Any:
    """mean over positions of 1 - cos(m T + x_in - m, x_out)."""
    import torch

    made = m @ T.to(m.dtype) + x_in - m
    return 1 - torch.nn.functional.cosine_similarity(made, x_out, dim=-1).mean()


def fit_cosine(m: Any, x_in: Any, x_out: Any, start: Any, steps: int, lr: float,
               tick: Callable[[int], None] | None = None) -> tuple[Any, list[float]]:
    """(T float64, the objective before each step and after the last): full-batch Adam on cosine_loss in float32 from
    `start`; the T of the lowest objective seen is returned, so it is never worse than `start`. `tick(n)` after
    the n-th step."""
    import torch

    T = start.float().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([T], lr=lr)
    best, best_T, history = float("inf"), start.double().clone(), []
    for step in range(steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss = cosine_loss(T, m, x_in, x_out)
        value = float(loss.detach())
        history.append(value)
        if value < best:
            best, best_T = value, T.detach().double().clone()
        if step < steps:
            loss.backward()
            optimizer.step()
            if tick is not None:
                tick(step + 1)
    return best_T, history


def fold(projection: Any, T: Any) -> None:
    """projection's output y becomes y T, in place: W <- T^T W (Linear, weight (out, in)), W <- W T (Conv1D,
    weight (in, out)), b <- b T; computed in float64, stored in the weight's dtype."""
    import torch

    with torch.no_grad():
        weight = projection.weight
        T = T.to(device=weight.device, dtype=torch.float64)
        folded = weight.double() @ T if weight_is_transposed(projection) else T.T @ weight.double()
        weight.copy_(folded.to(weight.dtype))
        bias = getattr(projection, "bias", None)
        if bias is not None:
            bias.copy_((bias.double() @ T).to(bias.dtype))
