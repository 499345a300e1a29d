"""heal --method lstsq|cosine: one linear map per removed run of blocks, fitted on calibration tokens (the text after
the held-out slice) and folded into the MLP output projection of the block before the run (models/replacement.py).
Runs are fitted in order, each on the activations of the model with the earlier runs already removed and folded."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from layerprobe.errors import NumericsError
from layerprobe.evaluation.taskfree import finish, metric_sum
from layerprobe.evaluation.variants import ranges_label
from layerprobe.models.layers import BlockStack, fold_target
from layerprobe.models.replacement import collect, contiguous_runs, cosine_loss, fit_cosine, fit_lstsq, fold
from layerprobe.models.surgery import removed_layers
from layerprobe.progress import Progress


def fold_targets(model: Any, stack: BlockStack, ids: list[int]) -> list[Any]:
    """The projection each removed run folds into, in run order; an ArchitectureError (nothing fitted or written)
    where one fold would not be exact."""
    return [fold_target(model, stack, first - 1) for first, _ in contiguous_runs(ids)]


@dataclass
class Repair:
    """What the fits did: the maps (run label -> T, float64), replace.csv's rows, the projections with their weights
    before the fold (to score the unrepaired model on the same pass), and the working time."""

    transforms: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    originals: list = field(default_factory=list)  # (module, weight, bias or None) before the fold
    folded: list = field(default_factory=list)  # (module, weight, bias or None) after
    seconds: float = 0.0


def _mse(made: Any, x_out: Any) -> float:
    return float(((made.double() - x_out.double()) ** 2).sum(-1).mean())


def _snapshot(module: Any) -> tuple:
    bias = getattr(module, "bias", None)
    return module, module.weight.detach().clone(), None if bias is None else bias.detach().clone()


def fit_run(method: str, acts: Any, ridge: float, steps: int, lr: float) -> tuple[Any, dict]:
    """(T, replace.csv's numbers) for one run's activations."""
    import torch

    m, x_in, x_out = acts.stacked()
    T = fit_lstsq(m, x_in, x_out, ridge)
    if not bool(torch.isfinite(T).all()):
        raise NumericsError("The least-squares map has NaN or infinite entries: raise --ridge (e.g. 1e-3) or pass "
                            "more --calibration-tokens.")
    history = []
    if method == "cosine":
        T, history = fit_cosine(m, x_in, x_out, T, steps, lr)
    eye = torch.eye(m.shape[1], dtype=torch.float64)
    with torch.no_grad():
        numbers = {"tokens": int(m.shape[0]), "mse_removed": _mse(x_in, x_out),
                   "mse_fitted": _mse(m.double() @ T + x_in.double() - m.double(), x_out),
                   "cosine_removed": float(cosine_loss(eye, m.double(), x_in.double(), x_out.double())),
                   "cosine_fitted": float(cosine_loss(T, m.double(), x_in.double(), x_out.double())),
                   "cosine_lstsq": history[0] if history else None}
    return T, numbers


def repair(model: Any, stack: BlockStack, ids: list[int], calibration: Any, method: str, ridge: float,
           steps: int, lr: float, device: str, progress: Progress) -> Repair:
    """Fit and fold one map per removed run of `ids` into `model` (its blocks all present; the full `stack`)."""
    runs, done, result = contiguous_runs(ids), [], Repair()
    targets = fold_targets(model, stack, ids)
    names = {id(m): n for n, m in model.named_modules()}
    progress("replaced runs", 0, len(runs))
    for number, ((first, last), projection) in enumerate(zip(runs, targets)):
        clock = time.perf_counter()
        with removed_layers(model, done, stack):
            acts = collect(model, projection, stack.blocks[first], stack.blocks[last], calibration, device)
        T, numbers = fit_run(method, acts, ridge, steps, lr)
        result.originals.append(_snapshot(projection))
        fold(projection, T)
        result.folded.append(_snapshot(projection))
        label = ranges_label(list(range(first, last + 1)))
        result.transforms[label] = T
        seconds = time.perf_counter() - clock
        result.seconds += seconds
        result.rows.append({"run": label, "first": first, "last": last, "folded_into": names.get(id(projection), ""),
                            **numbers, "seconds": round(seconds, 3)})
        done += range(first, last + 1)
        progress("replaced runs", number + 1, len(runs))
    return result


def _use(state: list) -> None:
    for module, weight, bias in state:
        module.weight.data.copy_(weight)
        if bias is not None:
            module.bias.data.copy_(bias)


def paired_scores(teacher: Any, student: Any, repaired: Repair, heldout: list, device: str) -> dict:
    """Held-out ppl and kl of the shortened model before and after the folds, and the unpruned model's ppl, in one
    pass (the unpruned logits once per batch): {'before': (ppl, kl), 'after': (ppl, kl), 'unpruned': ppl}."""
    import torch

    sums = {key: [0.0, 0] for key in ("before ppl", "before kl", "after ppl", "after kl", "unpruned ppl")}

    def add(key: str, original: Any, pruned: Any, ids: Any) -> None:
        total, count = metric_sum(key.split()[1], original, pruned, ids)
        sums[key][0] += total
        sums[key][1] += count

    try:
        with torch.no_grad():
            for batch in heldout:
                ids = batch.input_ids.to(device)
                original = teacher(input_ids=ids, use_cache=False).logits
                add("unpruned ppl", original, original, ids)
                for when, state in (("before", repaired.originals), ("after", repaired.folded)):
                    _use(state)
                    pruned = student(input_ids=ids, use_cache=False).logits
                    add(f"{when} ppl", original, pruned, ids)
                    add(f"{when} kl", original, pruned, ids)
    finally:
        _use(repaired.folded)
    value = {key: finish(key.split()[1], *slot) for key, slot in sums.items()}
    bad = [key for key, number in value.items() if not math.isfinite(number)]
    if bad:  # never a merged/ scored NaN
        fix = ("the folded maps make it: raise --ridge (e.g. 1e-3)" if all(k.startswith("after") for k in bad) else
               "the checkpoint's outputs make it, before any map: run with --dtype float32 or check the checkpoint")
        raise NumericsError(f"The held-out {', '.join(bad)} is NaN or infinite; {fix}; nothing was written as "
                            "repaired.")
    return {"before": (value["before ppl"], value["before kl"]), "after": (value["after ppl"], value["after kl"]),
            "unpruned": value["unpruned ppl"]}
