"""One measurement inside a training run: the probe batches, and the pass over them that leaves training as it was
(eval mode and no gradients inside; each module's training flag and the CPU and CUDA random states restored)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from layerprobe.config import DataOptions
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches, empty_corpus_error
from layerprobe.hooks import BlockCapture
from layerprobe.metrics.angular import AngularAccumulator, AngularStats
from layerprobe.models.device_map import input_device


def probe_batches(tokenizer: Any, data: DataOptions) -> tuple[list[tuple[Any, Any]], str]:
    """The fixed probe set, (input_ids, attention_mask) pairs of data.tokens packed tokens of the corpus on the CPU,
    and the corpus as described to a reader."""
    corpus = open_corpus(data.dataset, data.text_field)
    found = [(b.input_ids, b.attention_mask)
             for b in batches(corpus.texts(), tokenizer, data.seq_len, data.batch_size, data.tokens)]
    if not found:
        raise empty_corpus_error(corpus.spec)
    return found, corpus.description


def unwrapped(model: Any) -> Any:
    """The module a DistributedDataParallel (or DataParallel) wrapper trains; the model itself otherwise."""
    import torch

    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers):
        model = model.module
    return model


@contextlib.contextmanager
def isolated(model: Any) -> Iterator[None]:
    """Eval mode and no gradients inside; every module's own training flag and the CPU and CUDA random states are
    restored on exit, so the training that follows draws the same dropout masks and batches as without it."""
    import torch

    modes = [(module, module.training) for module in model.modules()]
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        model.eval()
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)


def rank_and_size() -> tuple[int, int]:
    """(rank, size) of an initialized torch.distributed group (DDP under torchrun), else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def measure_probe(model: Any, stack: Any, probe: list[tuple[Any, Any]], shared: bool = True) -> AngularStats:
    """d(x_i, x_j), norms, variances and next-layer cosines of the block inputs over the probe set. Under DDP each
    rank runs batches rank, rank + size, ... and the float64 sums are all-reduced: every rank gets the numbers
    one process would. shared=False: this process measures every batch on its own model."""
    import torch.distributed as dist

    rank, size = rank_and_size() if shared else (0, 1)
    device = input_device(model)
    accumulator = AngularAccumulator(len(stack.blocks) + 1, device=device)
    forward = getattr(model, "base_model", model)  # no full-vocabulary logits where the model has a head
    with isolated(model), BlockCapture(stack) as capture:
        for index, (ids, mask) in enumerate(probe):
            if index % size == rank:
                forward(input_ids=ids.to(device), attention_mask=mask.to(device))
                accumulator.update(capture.states)
    if size > 1:
        state = accumulator.state()
        dist.all_reduce(state, op=dist.ReduceOp.SUM)
        accumulator.load_state(state)
    return accumulator.result()
