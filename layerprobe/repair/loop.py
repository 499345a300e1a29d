"""The healing loop: AdamW on the LoRA adapters of the shortened model, held-out scores every N steps, and a save
of everything the next step depends on (adapters, optimizer, RNG, step, rows) every M steps, so --resume ends
where an uninterrupted run ends."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from layerprobe.config import HealConfig, TrainSettings
from layerprobe.errors import NumericsError, numerics_fix
from layerprobe.evaluation.taskfree import finish, metric_rows, metric_sum
from layerprobe.models.lora import load_optimizer_tensors, load_trained_tensors, optimizer_tensors, trained_tensors
from layerprobe.models.training import lr_factor
from layerprobe.progress import Progress, silent
from layerprobe.repair.change import change_columns, change_intervals
from layerprobe.runs.resume import PassCheckpoint


@dataclass
class Data:
    """The packed token batches: held-out (scored, never trained on) and training (step s reads batch s-1 mod n)."""

    heldout: list  # data.packing.Batch, exactly as `prune --task ppl|kl` reads the first --tokens of the corpus
    train: Any  # (n, batch, seq) int64: full batches of the text after the held-out slice
    first_position: int = 0  # the corpus position where the training (or calibration) text starts


@dataclass
class Models:
    student: Any  # the shortened model (blocks removed in place), peft-wrapped (lora) or its tail trainable
    teacher: Any  # the unpruned model, eval, never trained
    device: str


@dataclass
class Healing:
    """heal.csv's rows, the step reached and the working time, as saved and resumed."""

    rows: list = field(default_factory=list)
    step: int = 0
    seconds: float = 0.0  # the loop's working time, interrupted parts included
    before: float = 0.0  # of which the interrupted parts' (restored from the save)
    baseline: dict = field(default_factory=dict)  # step 0's per-sequence [sum, positions] by metric (the change's base)
    change: dict = field(default_factory=dict)  # the last scored step's paired intervals by metric (repair/change.py)


def logits(model: Any, ids: Any) -> Any:
    return model(input_ids=ids, use_cache=False).logits


HELDOUT_STAGE = "held-out scores (batches)"  # the progress stage of a held-out scoring, in held-out batches


def heldout_scores(models: Models, data: Data, sequences: dict | None = None, progress: Progress = silent,
                   stage: str = HELDOUT_STAGE) -> tuple[float, float]:
    """(ppl of the shortened model, mean KL(unpruned || shortened)) on the held-out batches: the same sums as
    `prune --task ppl` and `--task kl` (evaluation/metric.py); `sequences`, if given, gets each metric's
    [sum, positions] per held-out sequence (a healed curve's records, heal's paired intervals)."""
    import torch

    sums = {"ppl": [0.0, 0], "kl": [0.0, 0]}
    models.student.eval()
    progress(stage, 0, len(data.heldout))
    with torch.no_grad():
        for number, batch in enumerate(data.heldout, 1):
            ids = batch.input_ids.to(models.device)
            original, pruned = logits(models.teacher, ids), logits(models.student, ids)
            for metric, slot in sums.items():
                total, count, rows = metric_rows(metric, original, pruned, ids)
                slot[0] += total
                slot[1] += count
                if sequences is not None:
                    sequences.setdefault(metric, []).extend(rows)
            progress(stage, number, len(data.heldout))
    models.student.train()
    return finish("ppl", *sums["ppl"]), finish("kl", *sums["kl"])


def unpruned_ppl(models: Models, data: Data, progress: Progress = silent) -> float:
    """Perplexity of the unpruned model on the held-out batches (what healing could reach at best, in-domain)."""
    import torch

    total, count = 0.0, 0
    stage = "held-out scores of the unpruned model (batches)"
    progress(stage, 0, len(data.heldout))
    with torch.no_grad():
        for number, batch in enumerate(data.heldout, 1):
            ids = batch.input_ids.to(models.device)
            original = logits(models.teacher, ids)
            step_total, step_count = metric_sum("ppl", original, original, ids)
            total, count = total + step_total, count + step_count
            progress(stage, number, len(data.heldout))
    return finish("ppl", total, count)


def distill_loss(teacher_logits: Any, student_logits: Any) -> Any:
    """Mean over positions of KL(p || q), p the unpruned model's next-token distribution, q the shortened one's."""
    import torch

    log_p = torch.log_softmax(teacher_logits.float(), dim=-1)
    log_q = torch.log_softmax(student_logits.float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def step_loss(models: Models, ids: Any, objective: str) -> Any:
    """The training loss of one batch: next-token cross-entropy, or the distillation KL."""
    import torch

    if objective == "lm":
        return models.student(input_ids=ids, labels=ids, use_cache=False).loss
    with torch.no_grad():
        teacher = logits(models.teacher, ids)
    return distill_loss(teacher, logits(models.student, ids))


def _save(checkpoint: PassCheckpoint, models: Models, optimizer: Any, healing: Healing) -> None:
    """Everything the next step depends on, in one atomic file."""
    import torch

    flat, groups = optimizer_tensors(optimizer)
    tensors = {**{f"adapter/{k}": v for k, v in trained_tensors(models.student).items()},
               **{f"optimizer/{k}": v for k, v in flat.items()}, "rng/torch": torch.get_rng_state()}
    checkpoint.save(tensors, {"step": healing.step, "rows": healing.rows, "seconds": healing.seconds,
                              "param_groups": groups, "baseline": healing.baseline}, force=True)


def _restore(checkpoint: PassCheckpoint, models: Models, optimizer: Any) -> Healing | None:
    import torch

    loaded = checkpoint.load()
    if loaded is None:
        return None
    tensors, counters = loaded
    load_trained_tensors(models.student, {k[8:]: v for k, v in tensors.items() if k.startswith("adapter/")})
    load_optimizer_tensors(optimizer, {k[10:]: v for k, v in tensors.items() if k.startswith("optimizer/")},
                           counters["param_groups"])
    torch.set_rng_state(tensors["rng/torch"])
    seconds = float(counters["seconds"])
    return Healing(counters["rows"], int(counters["step"]), seconds, seconds, counters.get("baseline", {}))


def row(step: int, loss: float, lr: float, scores: tuple[float, float] | None, change: dict | None = None) -> dict:
    """heal.csv's row of a step: its loss, rate, held-out scores (NaN where not scored) and the paired intervals of
    their change from step 0 (`change`, repair/change.py; NaN at step 0 and where not scored)."""
    nan = float("nan")
    return {"step": step, "loss": loss, "lr": lr, "heldout_ppl": scores[0] if scores else nan,
            "heldout_kl": scores[1] if scores else nan, **change_columns(change)}


STEPS_STAGE = "heal steps (AdamW updates)"  # the training's progress stage
SUSPECT_SCALE = 1e3  # a LoRA scale alpha / r past this, not the rate, makes an update diverge (defaults: 2)


def _diverged(what: str, step: int, config: HealConfig, rate: str, start: Any = None) -> NumericsError:
    """The setting that made `what` non-finite: --lora-alpha where it scales every update far beyond the usual;
    the checkpoint (or --dtype) where `start` (the weights' dtype) says nothing trained has run into it yet (the
    step-0 scores, the first loss: a LoRA update starts at zero); else the rate."""
    scale = config.lora_alpha / config.lora_rank
    if start is not None:
        dtype = str(start).replace("torch.", "")
        return NumericsError(f"Healing cannot start: {what} at step {step}, before any update, on the checkpoint "
                             f"'{config.model.model}' at {dtype}: {numerics_fix(dtype)}; nothing was written as "
                             "healed.")
    if config.method == "lora" and scale > SUSPECT_SCALE:
        cause = (f"--lora-alpha {config.lora_alpha:g} (each update is scaled by alpha / r = {scale:.3g})",
                 "lower --lora-alpha (e.g. twice --lora-rank)")
    else:
        cause = (f"{rate} {config.lr:g}", f"lower {rate} (or keep --clip on)")
    return NumericsError(f"Healing diverged: {what} at step {step} with {cause[0]}: {cause[1]}; nothing was written "
                         "as healed.")


def _check_step(config: HealConfig, step: int, rate: str, dtype: Any, loss: float, norm: float | None) -> None:
    """A non-finite loss, or gradient norm (clipping an infinite norm zeroes every gradient: nothing is learned,
    silently), is an error naming its cause (_diverged). Step 1's loss comes before any update: the checkpoint's;
    its gradient is the checkpoint's too, unless a suspect --lora-alpha scales it."""
    first = step == 1 and not (config.method == "lora" and config.lora_alpha / config.lora_rank > SUSPECT_SCALE)
    if not math.isfinite(loss):
        raise _diverged(f"the training loss is {loss}", step, config, rate, dtype if step == 1 else None)
    if norm is not None and not math.isfinite(norm):
        raise _diverged(f"the gradient norm is {norm}", step, config, rate, dtype if first else None)


def heal_loop(config: HealConfig, models: Models, data: Data, checkpoint: PassCheckpoint, progress: Progress,
              on_save: Callable[[list], None], rate: str = "--lr", sequences: dict | None = None) -> Healing:
    """Train config.steps AdamW steps (resuming from the last save), scoring the held-out text at step 0, every
    --eval-every steps and at the end (`sequences`, if given, gets the end's per-sequence sums: heldout_scores);
    heal.csv's rows are returned. A non-finite loss, gradient norm, held-out
    score or adapter weight is a NumericsError naming what made it (_diverged): the checkpoint before any update,
    --lora-alpha, or `rate` (--lr, --heal-lr)."""
    import torch

    params = [p for p in models.student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    schedule = TrainSettings(steps=config.steps, lr=config.lr, clip=config.clip)
    healing = (_restore(checkpoint, models, optimizer) if config.resume else None) or Healing()
    clock = time.perf_counter() - healing.seconds
    models.student.train()
    dtype = params[0].dtype if params else None
    if healing.step == 0 and not healing.rows:
        scores = heldout_scores(models, data, healing.baseline, progress, "held-out scores before healing (batches)")
        if not all(math.isfinite(v) for v in scores):
            raise _diverged(f"the held-out ppl, kl are {scores[0]:g}, {scores[1]:g}", 0, config, rate, dtype)
        healing.rows.append(row(0, float("nan"), 0.0, scores))
    progress(STEPS_STAGE, healing.step, config.steps)
    while healing.step < config.steps:
        step = healing.step + 1
        lr = config.lr * lr_factor(step - 1, schedule)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids = data.train[(step - 1) % len(data.train)].to(models.device)
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(models, ids, config.objective)
        value = float(loss.detach())
        _check_step(config, step, rate, dtype, value, None)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, config.clip or math.inf)  # the total norm, before clipping
        _check_step(config, step, rate, dtype, value, float(norm))
        optimizer.step()
        last = step == config.steps
        scored: dict = sequences if last and sequences is not None else {}
        scores = (heldout_scores(models, data, scored, progress if last else silent,
                                 "held-out scores after healing (batches)") if step % config.eval_every == 0 or last
                  else None)
        if scores is not None and not all(math.isfinite(v) for v in scores):
            raise _diverged(f"the held-out ppl, kl are {scores[0]:g}, {scores[1]:g}", step, config, rate)
        if scores is not None:
            healing.change = change_intervals(healing.baseline, scored)
        healing.rows.append(row(step, value, lr, scores, healing.change if scores is not None else None))
        healing.step, healing.seconds = step, time.perf_counter() - clock
        if step % config.save_every == 0 and step < config.steps:
            _save(checkpoint, models, optimizer, healing)
            on_save(healing.rows)
        progress(STEPS_STAGE, step, config.steps)
    optimizer.zero_grad(set_to_none=True)
    if not all(bool(torch.isfinite(p).all()) for p in params):  # never a merged/ of NaN or infinite weights
        raise _diverged("an adapter weight is not finite", healing.step, config, rate)
    models.student.eval()
    return healing
