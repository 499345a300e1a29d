"""Healed curves (`prune --curve --heal lstsq|cosine|lora|tail`, `--heal-steps N` for the trained ones): each
distinct scored layer set is repaired as `layerprobe heal --method M --objective lm` repairs it (on the text after
the probe tokens) and scored again on the same probe tokens, so curve.csv and curve.png show unhealed and healed side
by side (Gromov et al. 2024, Fig. 1). Every healed set is saved as it finishes: a resumed curve heals only the sets
left. A set the replacement cannot repair exactly (block 0 removed, a norm after the MLP, an MoE block before the
cut) gets an empty healed_score and a warning naming why."""

from __future__ import annotations

import copy
import math
from typing import Any

from layerprobe.config import REPLACEMENTS, HealConfig, PruneConfig
from layerprobe.errors import ArchitectureError, ConfigError, NumericsError
from layerprobe.evaluation.records import healed_label, sequence_rows
from layerprobe.evaluation.variants import Variant, ranges_label
from layerprobe.models.layers import find_blocks, fold_target
from layerprobe.models.lora import lora_targets, with_lora
from layerprobe.models.surgery import removed_layers
from layerprobe.progress import Progress
from layerprobe.repair.data import load_data
from layerprobe.repair.loop import Healing, Models, heal_loop, heldout_scores
from layerprobe.repair.replace import repair
from layerprobe.repair.tail import tail_only_trainable
from layerprobe.runs.resume import Ledger


def heal_method(config: PruneConfig) -> str | None:
    """--heal, else lora where --heal-steps is given (the older spelling), else None: no healing."""
    return config.curve.heal or ("lora" if config.curve.heal_steps else None)


def check_healing(config: PruneConfig) -> None:
    """Healing scores on the probe corpus: ppl or kl of whole blocks; trained methods need steps, replacement none."""
    method, steps = heal_method(config), config.curve.heal_steps
    if method and (config.task not in ("ppl", "kl") or config.part != "block"):
        raise ConfigError(f"--heal {method} repairs removed blocks and scores them on --task ppl or kl (got --task "
                          f"{config.task}, --part {config.part}): use those, or heal a set with `layerprobe heal` "
                          "and evaluate its merged/ checkpoint.")
    if method in REPLACEMENTS and steps:
        raise ConfigError(f"--heal {method} trains nothing, so --heal-steps {steps} has no use: drop --heal-steps, or "
                          "pass --heal lora or tail.")
    if method and method not in REPLACEMENTS and not steps:
        raise ConfigError(f"--heal {method} trains: pass --heal-steps N (e.g. 200).")


def _settings(config: PruneConfig) -> HealConfig:
    steps = config.curve.heal_steps or 1
    return HealConfig(model=config.model, data=config.data, method=heal_method(config), steps=steps,
                      lr=config.curve.heal_lr, objective="lm", eval_every=steps, save_every=steps, gain=False,
                      calibration_tokens=config.curve.heal_calibration_tokens)


class _NoSave:
    """heal_loop's checkpoint for a set healed in one go (save_every = steps: it never saves)."""

    def load(self) -> None:
        return None


def heal_one(probe: Any, ids: list[int], settings: HealConfig, data: Any, metric: str) -> tuple[float, list[dict]]:
    """The task's metric (ppl or kl, on the probe tokens) of the model without `ids`, repaired on a copy, and its
    per-sequence records; an ArchitectureError where a replacement would not be exact."""
    with probe.loaded.as_saved():
        student = copy.deepcopy(probe.model)
    stack = find_blocks(student, probe.stack.path)
    sequences: dict = {}
    if settings.method in REPLACEMENTS:
        repair(student, stack, ids, list(data.train), settings.method, settings.ridge, settings.cosine_steps,
               settings.cosine_lr, probe.device, lambda *a: None, teacher=probe.model, heldout=data.heldout)
        with removed_layers(student, ids, stack):
            ppl, kl = heldout_scores(Models(student, probe.model, probe.device), data, sequences)
        value = float(ppl if metric == "ppl" else kl)
        if not math.isfinite(value):  # never a healed curve point scored NaN
            raise NumericsError(f"--heal {settings.method}: the repaired set {ranges_label(ids)} scores a NaN or "
                                f"infinite {metric}: run with --dtype float32, or repair that set with `layerprobe heal --ridge 1e-3`.")
        return value, sequence_rows(metric, sequences[metric])
    with removed_layers(student, ids, stack) as short:
        if settings.method == "lora":
            trained = with_lora(student, lora_targets(student, short, ()), settings.lora_rank, settings.lora_alpha,
                                settings.seed)
        else:
            tail_only_trainable(student, short, settings.tail_blocks)
            trained = student
        models = Models(trained, probe.model, probe.device)
        healing: Healing = heal_loop(settings, models, data, _NoSave(), lambda *a: None, lambda rows: None,
                                     rate="--heal-lr", sequences=sequences)  # the last scores per sequence too
    last = healing.rows[-1]
    return float(last["heldout_ppl"] if metric == "ppl" else last["heldout_kl"]), sequence_rows(metric,
                                                                                                sequences[metric])


def check_foldable(config: PruneConfig, probe: Any) -> None:
    """--heal lstsq|cosine where no block of the model can carry a folded map (a Post-LN architecture, a norm
    placement between the MLP and the next block everywhere): refused before the sweep, as heal refuses it, never a
    curve whose every healed score is NaN; a set that only its own blocks keep from a fold (block 0) still goes on
    unrepaired with a warning (heal_sets)."""
    method = heal_method(config)
    if method not in REPLACEMENTS:
        return
    reasons = []
    for index in range(len(probe.stack) - 1):
        try:
            fold_target(probe.model, probe.stack, index)
            return
        except ArchitectureError as exc:
            reasons.append(str(exc))
    reason = (reasons[0] if reasons else "the model has one block").replace("use --method lora or tail",
                                                                             "use --heal lora or tail")
    raise ArchitectureError(f"--heal {method} can repair no removal here: {reason}")


UNPRUNED = ""  # the healed-sets key of the unpruned model, healed the same way: the fair reference


def heal_sets(config: PruneConfig, probe: Any, variants: list[Variant], ledger: Ledger,
              progress: Progress) -> dict[str, float]:
    """Set label -> its score after healing, for every scored set and for the unpruned model (key UNPRUNED: the
    same steps on the same text also adapt a model with every layer to the corpus, so a healed set is compared
    with it, not with the unhealed baseline; a replacement leaves it as it is). Saved after each with its
    per-sequence records (removed: '<set> healed', 'unpruned healed'), resumed from the ledger; a set a replacement
    cannot repair is NaN, its reason in the ledger's heal_refused."""
    if not heal_method(config):
        return {}
    settings = _settings(config)
    data = load_data(settings, probe, settings.calibration_tokens if settings.method in REPLACEMENTS else None)
    healed = dict(ledger.state.get("healed", {}))
    refused = dict(ledger.state.get("heal_refused", {}))
    wanted = [UNPRUNED, *(variant.label for variant in variants)]
    removed = {UNPRUNED: [], **{variant.label: list(variant.removed) for variant in variants}}
    progress("healed sets", sum(label in healed for label in wanted), len(wanted))
    for label in wanted:
        if label not in healed:
            try:
                healed[label], rows = heal_one(probe, removed[label], settings, data, config.task)
                ledger.add_records(healed_label(label), rows)  # before its score: done only with its records
            except ArchitectureError as exc:  # this set only (block 0, an MoE block before it): the curve goes on
                healed[label], refused[label] = None, str(exc)  # JSON: null
            ledger.save_state(healed=healed, heal_refused=refused)
        progress("healed sets", sum(label in healed for label in wanted), len(wanted))
    return {label: math.nan if value is None else value for label, value in healed.items()}


def refusals(ledger: Ledger) -> list[str]:
    """The warnings of sets a replacement could not repair (heal_sets), one per set."""
    return [f"--heal left {label} unrepaired: {reason}" for label, reason in ledger.state.get("heal_refused", {}).items()]
