"""One gradnorm measurement: per-block gradient norms and output variance of a model on real-token batches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from layerprobe.errors import NumericsError, numerics_fix
from layerprobe.hooks import GradientCapture
from layerprobe.metrics.gradients import GradSquares, input_grad_norm, output_variance
from layerprobe.models.training import lm_loss


@contextlib.contextmanager
def frozen_outside(model: Any, stack: Any) -> Iterator[None]:
    """Skip the weight gradients of everything outside the blocks (embeddings, final norm, LM head: only the
    blocks' gradients are reported, and the LM head's alone is ~7% of a llama-130m pass); restored on exit."""
    in_blocks = {id(p) for block in stack.blocks for p in block.parameters()}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in in_blocks]
    for param in frozen:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param in frozen:
            param.requires_grad_(True)


def measure_gradients(model: Any, stack: Any, batch_list: list, encoder: bool, tokenizer: Any, seed: int,
                      on_batch: Any = None) -> list[dict]:
    """One gradient per batch; rows of (batch, layer, kind, module, grad_norm) and (batch, layer, variance).
    on_batch() is called after each batch's pass. Grad mode is on inside and as it was after."""
    import torch

    rows = []
    generator = torch.Generator().manual_seed(seed)
    try:
        with torch.enable_grad(), frozen_outside(model, stack), GradientCapture(stack) as capture, \
                GradSquares(stack.blocks) as squares:
            for b, (ids, mask) in enumerate(batch_list):
                model.zero_grad(set_to_none=True)
                squares.reset()
                lm_loss(model, ids, mask, encoder, tokenizer, generator).backward()
                for layer in range(len(stack.blocks)):
                    rows += _layer_rows(b, layer, squares, capture, mask)
                    capture.clear(layer)
                if on_batch is not None:
                    on_batch()
    finally:
        model.zero_grad(set_to_none=True)
    return rows


def _layer_rows(batch: int, layer: int, squares: Any, capture: GradientCapture, mask: Any) -> list[dict]:
    import math

    rows = [{"batch": batch, "layer": layer, "kind": "params", "module": module, "grad_norm": value}
            for module, value in squares.norms(layer).items()]
    inputs, output = capture.inputs[layer], capture.outputs[layer]
    grad = inputs.grad if inputs is not None else None
    if grad is not None:
        rows.append({"batch": batch, "layer": layer, "kind": "input", "module": "block",
                     "grad_norm": input_grad_norm(grad, mask.to(grad.device))})
    rows.append({"batch": batch, "layer": layer, "kind": "variance", "module": "block",
                 "variance": output_variance(output, mask.to(output.device))})
    bad = next((r for r in rows if not math.isfinite(r.get("grad_norm", r.get("variance")))), None)
    if bad is not None:
        dtype = str(output.dtype) if output is not None else None
        what = f"The {bad['kind']} {bad['module']} of block {layer} is NaN or infinite in batch {batch}"
        raise NumericsError(f"{what}: {numerics_fix(dtype)}.", what)
    return rows
