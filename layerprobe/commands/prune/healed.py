"""Healed curves (`prune --curve --heal-steps N`): each distinct scored layer set is healed with LoRA as `layerprobe
heal --objective lm` heals it (on the text after the probe tokens) and scored again on the same probe tokens, so
curve.csv and curve.png show unhealed and healed side by side (Gromov et al. 2024, Fig. 1). Every healed set is
saved as it finishes: a resumed curve heals only the sets left."""

from __future__ import annotations

import copy
from typing import Any

from layerprobe.commands.heal.loop import Healing, Models, heal_loop
from layerprobe.commands.heal.run import load_data
from layerprobe.config import HealConfig, PruneConfig
from layerprobe.errors import ConfigError
from layerprobe.evaluation.variants import Variant
from layerprobe.models.layers import find_blocks
from layerprobe.models.lora import lora_targets, with_lora
from layerprobe.models.surgery import removed_layers
from layerprobe.progress import Progress
from layerprobe.runs.resume import Ledger


def check_healing(config: PruneConfig) -> None:
    """--heal-steps scores on the probe corpus: ppl or kl of whole blocks."""
    if config.curve.heal_steps and (config.task not in ("ppl", "kl") or config.part != "block"):
        raise ConfigError(f"--heal-steps heals removed blocks and scores them on --task ppl or kl (got --task "
                          f"{config.task}, --part {config.part}): use those, or heal a set with `layerprobe heal` "
                          "and evaluate its merged/ checkpoint.")


def _settings(config: PruneConfig) -> HealConfig:
    steps = config.curve.heal_steps
    return HealConfig(model=config.model, data=config.data, steps=steps, lr=config.curve.heal_lr, objective="lm",
                      eval_every=steps, save_every=steps, gain=False)


class _NoSave:
    """heal_loop's checkpoint for a set healed in one go (save_every = steps: it never saves)."""

    def load(self) -> None:
        return None


def heal_one(probe: Any, ids: list[int], settings: HealConfig, data: Any, metric: str) -> float:
    """The task's metric (ppl or kl, on the probe tokens) of the model without `ids`, healed on a copy."""
    with probe.loaded.as_saved():
        student = copy.deepcopy(probe.model)
    stack = find_blocks(student, probe.stack.path)
    with removed_layers(student, ids, stack) as short:
        wrapped = with_lora(student, lora_targets(student, short, ()), settings.lora_rank, settings.lora_alpha,
                            settings.seed)
        healing: Healing = heal_loop(settings, Models(wrapped, probe.model, probe.device), data, _NoSave(),
                                     lambda *a: None, lambda rows: None, rate="--heal-lr")
    last = healing.rows[-1]
    return float(last["heldout_ppl"] if metric == "ppl" else last["heldout_kl"])


UNPRUNED = ""  # the healed-sets key of the unpruned model, healed the same way: the fair reference


def heal_sets(config: PruneConfig, probe: Any, variants: list[Variant], ledger: Ledger,
              progress: Progress) -> dict[str, float]:
    """Set label -> its score after healing, for every scored set and for the unpruned model (key UNPRUNED: the
    same steps on the same text also adapt a model with every layer to the corpus, so a healed set is compared
    with it, not with the unhealed baseline). Saved after each, resumed from the ledger."""
    if not config.curve.heal_steps:
        return {}
    settings = _settings(config)
    data = load_data(settings, probe)
    healed = dict(ledger.state.get("healed", {}))
    wanted = [UNPRUNED, *(variant.label for variant in variants)]
    removed = {UNPRUNED: [], **{variant.label: list(variant.removed) for variant in variants}}
    progress("healed sets", sum(label in healed for label in wanted), len(wanted))
    for label in wanted:
        if label not in healed:
            healed[label] = heal_one(probe, removed[label], settings, data, config.task)
            ledger.save_state(healed=healed)
        progress("healed sets", sum(label in healed for label in wanted), len(wanted))
    return healed
