"""heal --method lstsq|cosine: one linear map per removed run of blocks, fitted on calibration tokens (the text after
the held-out slice) and folded into the MLP output projection of the block before the run (models/replacement.py).
Runs are fitted in order, each on the activations of the model with the earlier runs already removed and folded."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from layerprobe.errors import NumericsError
from layerprobe.evaluation.taskfree import Original, finish, metric_rows
from layerprobe.evaluation.variants import ranges_label
from layerprobe.hooks import BlockCapture, produced_inside, replay_from
from layerprobe.models.layers import BlockStack, find_blocks, fold_target, output_scale
from layerprobe.models.replacement import collect, contiguous_runs, cosine_loss, fit_cosine, fit_lstsq, fold
from layerprobe.models.surgery import removed_layers, tail_only
from layerprobe.progress import Progress, announce, silent
from layerprobe.repair.change import change_intervals, sequences
from layerprobe.repair.loop import HELDOUT_STAGE
from layerprobe.repair.verify import verify_folds


def fold_targets(model: Any, stack: BlockStack, ids: list[int]) -> list[Any]:
    """The projection each removed run folds into, in run order; an ArchitectureError (nothing fitted or written)
    where one fold would not be exact."""
    return [fold_target(model, stack, first - 1) for first, _ in contiguous_runs(ids)]


@dataclass
class Repair:
    """What the fits did: the maps (run label -> T, float64), replace.csv's rows and the working time."""

    transforms: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    seconds: float = 0.0
    fold_difference: float = 0.0  # merged vs fitted logits on held-out positions, relative (repair/verify.py)


def _mse(made: Any, x_out: Any) -> float:
    return float(((made.double() - x_out.double()) ** 2).sum(-1).mean())


def fit_run(method: str, acts: Any, ridge: float, steps: int, lr: float, progress: Progress = silent,
            label: str = "") -> tuple[Any, dict]:
    """(T, replace.csv's numbers) for one run's activations (`label` names the run in the progress)."""
    import torch

    m, x_in, x_out = acts.stacked()
    announce(f"fitting the least-squares map of run {label} ({m.shape[1]} x {m.shape[1]}, {m.shape[0]:,} positions)")
    T = fit_lstsq(m, x_in, x_out, ridge)
    if not bool(torch.isfinite(T).all()):
        raise NumericsError("The least-squares map has NaN or infinite entries: raise --ridge (e.g. 1e-3) or pass "
                            "more --calibration-tokens.")
    history = []
    if method == "cosine":
        stage = f"cosine fit of run {label} (Adam steps)"
        progress(stage, 0, steps)
        T, history = fit_cosine(m, x_in, x_out, T, steps, lr, lambda n: progress(stage, n, steps))
    eye = torch.eye(m.shape[1], dtype=torch.float64)
    with torch.no_grad():
        numbers = {"tokens": int(m.shape[0]), "mse_removed": _mse(x_in, x_out),
                   "mse_fitted": _mse(m.double() @ T + x_in.double() - m.double(), x_out),
                   "cosine_removed": float(cosine_loss(eye, m.double(), x_in.double(), x_out.double())),
                   "cosine_fitted": float(cosine_loss(T, m.double(), x_in.double(), x_out.double())),
                   "cosine_lstsq": history[0] if history else None,
                   "cosine_kept_lstsq": kept_start(history) if history else None}
    return T, numbers


def kept_start(history: list[float]) -> bool:
    """No Adam step lowered the cosine objective below the lstsq start's (fit_cosine then returns the start): a
    --cosine-lr too large (or too small to move a float32 objective) makes cosine an lstsq fit."""
    return not any(value < history[0] for value in history[1:])


def cosine_warning(rows: list[dict], lr: float) -> str | None:
    """heal's warning where cosine kept the lstsq map of a run (replace.csv's cosine_kept_lstsq)."""
    kept = [row["run"] for row in rows if row.get("cosine_kept_lstsq")]
    if not kept:
        return None
    return (f"--method cosine: no Adam step at --cosine-lr {lr:g} lowered the cosine objective below the lstsq "
            f"start for run {', '.join(kept)}: its lstsq map was kept (the result is lstsq's); try another "
            "--cosine-lr (default 1e-4).")


REPLACED_STAGE = "replaced runs (captured, fitted and folded)"


def repair(model: Any, stack: BlockStack, ids: list[int], calibration: Any, method: str, ridge: float,
           steps: int, lr: float, device: str, progress: Progress, *, teacher: Any, heldout: list) -> Repair:
    """Fit and fold one map per removed run of `ids` into `model` (its blocks all present; the full `stack`), then
    verify the folds against `teacher` (the same weights, unfolded) on the first `heldout` batch: an
    ArchitectureError where they are not exact (repair/verify.py)."""
    runs, done, result = contiguous_runs(ids), [], Repair()
    targets = fold_targets(model, stack, ids)
    scale = output_scale(model)
    names = {id(m): n for n, m in model.named_modules()}
    capture = f"capture of activations (calibration batches, {len(calibration)} per run)"
    progress(REPLACED_STAGE, 0, len(runs))
    progress(capture, 0, len(runs) * len(calibration))
    for number, ((first, last), projection) in enumerate(zip(runs, targets)):
        clock = time.perf_counter()
        label = ranges_label(list(range(first, last + 1)))
        with removed_layers(model, done, stack):
            acts = collect(model, projection, stack.blocks[first], stack.blocks[last], calibration, device, scale,
                           lambda n: progress(capture, number * len(calibration) + n, len(runs) * len(calibration)))
        T, numbers = fit_run(method, acts, ridge, steps, lr, progress, label)
        fold(projection, T)
        result.transforms[label] = T
        seconds = time.perf_counter() - clock
        result.seconds += seconds
        result.rows.append({"run": label, "first": first, "last": last, "folded_into": names.get(id(projection), ""),
                            **numbers, "seconds": round(seconds, 3)})
        done += range(first, last + 1)
        progress(REPLACED_STAGE, number + 1, len(runs))
    announce("verifying the folds: the merged model's logits against the fitted model's")
    result.fold_difference = verify_folds(teacher, model, stack.path, ids, list(result.transforms.values()),
                                          heldout[:1], device, method)
    return result


def _batch_logits(teacher: Any, student: Any, stacks: tuple, ids: list[int], tokens: Any) -> tuple:
    """(unpruned, before, after) logits of one batch, the blocks they share run once: the unpruned forward records
    every block's input; the shortened model restarts from the input of its first removed block, the repaired one
    from the input of the block before it (the first whose weights differ: its folded projection), each through its
    own final norm and head. Where a removed block feeds later blocks' arguments (hooks.produced_inside), a replay of
    their recorded calls would be wrong: the shortened models are run whole instead."""
    first = min(ids)
    with BlockCapture(stacks[0], keep_calls=True) as capture:
        original = teacher(input_ids=tokens, use_cache=False).logits
        states, calls = list(capture.states), list(capture.calls)
    outputs = []
    for model, stack, start in ((teacher, stacks[0], first), (student, stacks[1], first - 1)):
        if produced_inside(calls) & set(ids):
            with removed_layers(model, ids, stack):
                outputs.append(model(input_ids=tokens, use_cache=False).logits)
            continue
        hidden = replay_from(list(stack.blocks), calls, states[start], start, skip=set(ids))
        with tail_only(model, stack) as replay:
            replay.like(capture)
            replay.value = hidden
            outputs.append(model(input_ids=tokens, use_cache=False).logits)
    return original, *outputs


def paired_scores(teacher: Any, student: Any, stack_path: str, ids: list[int], heldout: list, device: str,
                  progress: Progress = silent) -> dict:
    """Held-out ppl and kl of the shortened model before the folds (the unpruned model without `ids`) and after
    (`student`, every block present, its projections folded, without `ids`), and the unpruned model's ppl, on the
    same batches: {'before': (ppl, kl), 'after': (ppl, kl), 'unpruned': ppl, 'change': the paired intervals of after -
    before over the held-out sequences (repair/change.py), 'sequences': how many}. The blocks before the first folded one
    are run once per batch (_batch_logits: the same numbers as three plain forwards)."""
    import torch

    stacks = (find_blocks(teacher, stack_path), find_blocks(student, stack_path))
    sums = {key: [0.0, 0] for key in ("before ppl", "before kl", "after ppl", "after kl", "unpruned ppl")}
    rows: dict = {"before": {}, "after": {}}  # per held-out sequence [sum, positions], by metric

    def add(key: str, reference: Any, pruned: Any, tokens: Any) -> None:
        when, metric = key.split()
        total, count, each = metric_rows(metric, reference, pruned, tokens)
        sums[key][0] += total
        sums[key][1] += count
        if when in rows:
            rows[when].setdefault(metric, []).extend(each)

    progress(HELDOUT_STAGE, 0, len(heldout))
    with torch.no_grad():
        for number, batch in enumerate(heldout, 1):
            tokens = batch.input_ids.to(device)
            logits = _batch_logits(teacher, student, stacks, ids, tokens)
            reference = Original("kl", logits[0])  # log p and p once for both kl
            add("unpruned ppl", reference, logits[0], tokens)
            for when, pruned in (("before", logits[1]), ("after", logits[2])):
                add(f"{when} ppl", reference, pruned, tokens)
                add(f"{when} kl", reference, pruned, tokens)
            progress(HELDOUT_STAGE, number, len(heldout))
    value = {key: finish(key.split()[1], *slot) for key, slot in sums.items()}
    bad = [key for key, number in value.items() if not math.isfinite(number)]
    if bad:  # never a merged/ scored NaN
        fix = ("the folded maps make it: raise --ridge (e.g. 1e-3)" if all(k.startswith("after") for k in bad) else
               "the checkpoint's outputs make it, before any map: run with --dtype float32 or check the checkpoint")
        raise NumericsError(f"The held-out {', '.join(bad)} is NaN or infinite; {fix}; nothing was written as "
                            "repaired.")
    return {"before": (value["before ppl"], value["before kl"]), "after": (value["after ppl"], value["after kl"]),
            "unpruned": value["unpruned ppl"], "change": change_intervals(rows["before"], rows["after"]),
            "sequences": sequences(rows["before"])}
