"""run_heal(config): `layerprobe heal`. Remove the blocks (--remove, --from-curve, or an exported folder's record),
repair the shortened model (--method lora: LoRA adapters with peft; tail: the LM head and the last kept blocks
trained; lstsq, cosine: one linear map per removed run folded into the block before it, no training: replace.py),
score held-out text before and after, and write the run folder: adapter/ (lora: PeftModel.from_pretrained),
transform.safetensors and replace.csv (lstsq, cosine), merged/ (plain transformers, the export contract), heal.csv,
heal.png, summary.json, manifest.json.

The held-out text is the first --tokens positions of the corpus, packed as `prune --task ppl|kl` packs them (its
step-0 kl is prune's kl of the same removal); training reads the sequences after it, batch s-1 at step s, and
cycles when the text ends; the replacement maps are fitted on the first --calibration-tokens positions after it. The unpruned model stays in memory beside its shortened copy (kl, distill).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Any

from layerprobe.commands.heal import COMMAND
from layerprobe.commands.heal.outputs import (OUTPUTS_STAGE, TRANSFORM_FILE, heal_summary, heal_table, save_merged, save_outputs,
                                              trained_details, write_transforms)
from layerprobe.commands.probe import open_probe, preflight, refuse_ranges_early
from layerprobe.config import HEAL_METHODS, REPLACEMENTS, HealConfig
from layerprobe.errors import ConfigError
from layerprobe.evaluation.variants import ranges_label
from layerprobe.models.layers import find_blocks, is_encoder
from layerprobe.models.lora import lora_targets, with_lora
from layerprobe.models.surgery import removed_layers
from layerprobe.plots.heal import heal_plot
from layerprobe.lineage import heal_refusal, removal_of, what_it_is
from layerprobe.progress import Progress, notice, silent
from layerprobe.removal import (REMOVAL_FILE, check_record_ids, check_weights, from_curve, parse_remove,
                                recorded_weights)
from layerprobe.repair.change import change_record
from layerprobe.repair.data import load_data
from layerprobe.repair.loop import Data, Models, heal_loop, row
from layerprobe.repair.replace import cosine_warning, fold_targets, paired_scores, repair
from layerprobe.repair.tail import tail_only_trainable
from layerprobe.commands.heal import REPLACE
from layerprobe.runs.columns import names
from layerprobe.runs.folder import (abandons_on_error, check_out_apart, check_owned, model_label, prepare_run_dir,
                                    run_folder_note, write_csv)
from layerprobe.runs.manifest import start_time
from layerprobe.runs.resume import PassCheckpoint, check_resume
from layerprobe.runs.write import RunResult, write_run
from layerprobe.settings import takes


def _no_record(spec: str | None) -> str:
    """Why MODEL says nothing about what to remove (heal's message when no removal is given)."""
    path = Path(spec) if spec else None
    if path is not None and path.is_dir():
        return run_folder_note(path) or f"'{spec}' is a model folder, not an export (it holds no {REMOVAL_FILE})"
    if path is not None:
        return f"'{spec}' is no folder here (an export is a folder holding {REMOVAL_FILE})"
    return "no MODEL was given"


def removal_source(config: HealConfig) -> tuple[str, Any, dict | None]:
    """(model to load, the blocks to remove as text or ids, the exported record when MODEL is an export)."""
    spec = config.model.model
    record = removal_of(spec)  # one line naming the file and the key, never a traceback
    given_removal = (f"--remove {config.remove}" if config.remove else
                     f"--from-curve {config.from_curve}" if config.from_curve else None)
    refusal = record and heal_refusal(spec, record, given_removal)
    if refusal:  # a healed checkpoint, or an export with a removal of its own given too (lineage.py)
        raise ConfigError(refusal)
    given = [n for n, v in (("--remove", config.remove), ("--from-curve", config.from_curve),
                            ("an exported MODEL", record is not None)) if v]
    if not given:
        raise ConfigError(f"heal needs the blocks to remove, and {_no_record(spec)}: pass --remove 20-27, "
                          "--from-curve RUN, or an exported folder as MODEL.")
    if len(given) != 1:
        raise ConfigError(f"heal takes one of --remove 20-27, --from-curve RUN or an exported folder as MODEL "
                          f"(got {' and '.join(given)}): pass exactly one.")
    if config.from_curve:
        model, remove, part = from_curve(config.from_curve, config.strategy, config.k, "heal")
        if part != "block":
            raise ConfigError(f"--from-curve: that curve removed {part} sub-layers; heal heals removed blocks: pass a "
                              "curve run of whole blocks (--part block).")
        return spec or model, remove, None
    if config.remove:
        return spec, config.remove, None
    if record["part"] != "block":
        raise ConfigError(f"'{spec}' zeroed {record['part']} sub-layers; heal heals removed blocks: export with "
                          "--part block.")
    source = record.get("source_path")  # absolute: where the export read it, whatever the working directory now
    source = source if source and Path(source).is_absolute() and Path(source).is_dir() else record["source_model"]
    inner = removal_of(source)
    if inner is not None:  # an export of an export: the record's blocks number its source, itself an export
        notice(f"'{spec}' removes block(s) {ranges_label(record['removed'])} of '{source}', {what_it_is(inner)}: "
               f"heal builds on '{source}' as the record says.")
    return source, record["removed"], record


def _check_source(config: HealConfig, record: dict | None, loaded: Any, num_layers: int) -> list[int] | None:
    """The loaded model is the one the curve run or the export was made from (unless --allow-other-weights), and an
    export's record names only blocks it has: the record's ids, or None for --remove and --from-curve."""
    if config.from_curve:
        check_weights(recorded_weights(config.from_curve), loaded, f"--from-curve '{config.from_curve}'",
                      config.allow_other_weights)
    if record is None:
        return None
    path = Path(config.model.model) / REMOVAL_FILE
    check_weights(record.get("weights") if isinstance(record.get("weights"), str) else None, loaded, f"'{path}'",
                  config.allow_other_weights)
    return check_record_ids(record, path, num_layers)


def _checks(config: HealConfig) -> None:
    if config.steps < 1:
        raise ConfigError(f"--steps must be positive, got {config.steps}.")
    if config.objective not in ("lm", "distill"):
        raise ConfigError(f"Unknown --objective '{config.objective}': use lm or distill.")
    if config.method not in HEAL_METHODS:
        raise ConfigError(f"Unknown --method '{config.method}': use {', '.join(HEAL_METHODS)}.")


def _trained(config: HealConfig, probe: Any, student: Any, ids: list[int], data: Data, folder: Path,
             record: dict | None, progress: Progress) -> tuple[dict, dict, Any, Any]:
    """lora and tail: train, score, save. (details, saved, heal.csv's table, heal.png)."""
    checkpoint = PassCheckpoint(folder, probe.identity(config, removed=ids))
    stack = find_blocks(student, probe.stack.path)
    with removed_layers(student, ids, stack) as short:
        if config.method == "lora":
            targets = lora_targets(student, short, config.lora_targets)
            trained = with_lora(student, targets, config.lora_rank, config.lora_alpha, config.seed)
        else:
            targets, trained = tail_only_trainable(student, short, config.tail_blocks), student
        models = Models(trained, probe.model, probe.device)
        healing = heal_loop(config, models, data, checkpoint, progress,
                            lambda rows: write_csv(folder / "heal.csv", heal_table(rows)))
        saved = save_outputs(folder, config, probe, models, data, ids, record, healing, progress)
    table = heal_table(healing.rows)
    what = (f"{config.objective} healing, {config.steps} steps" if config.method == "lora" else
            f"LM head and last {config.tail_blocks} blocks trained ({config.objective}), {config.steps} steps")
    details = trained_details(config, probe, targets, data, saved["trainable"])
    return details | {"repair_seconds": round(healing.seconds, 3)}, saved, table, (what, healing.before)


def _replaced(config: HealConfig, probe: Any, student: Any, ids: list[int], data: Data, folder: Path,
              record: dict | None, progress: Progress) -> tuple[dict, dict, Any, Any]:
    """lstsq and cosine: fit and fold the maps, score before and after in one pass, save."""
    import pandas as pd

    stack = find_blocks(student, probe.stack.path)
    repaired = repair(student, stack, ids, list(data.train), config.method, config.ridge, config.cosine_steps,
                      config.cosine_lr, probe.device, progress, teacher=probe.model,
                      heldout=data.heldout)
    write_transforms(folder / TRANSFORM_FILE, repaired.transforms, {"method": config.method, "ridge": config.ridge})
    write_csv(folder / "replace.csv", pd.DataFrame(repaired.rows, columns=names(REPLACE)))
    cosine = config.method == "cosine"
    warning = cosine_warning(repaired.rows, config.cosine_lr) if cosine else None
    if warning:
        probe.warnings.append(warning)
    kept = [r["run"] for r in repaired.rows if r["cosine_kept_lstsq"]] if cosine else None
    tokens = int(data.train.numel())
    calibration = {"dataset": probe.corpus.description, "tokens": tokens, "first_position": data.first_position,
                   "last_position": data.first_position + tokens - 1, "sequences": int(data.train.shape[0] *
                                                                                      data.train.shape[1])}
    scores = paired_scores(probe.model, student, probe.stack.path, ids, data.heldout, probe.device, progress)
    with removed_layers(student, ids, stack):
        healed = {"method": config.method, "ridge": config.ridge, "calibration": calibration,
                  "cosine_steps": config.cosine_steps if cosine else None, "cosine_kept_lstsq": kept,
                  "heldout_before": dict(zip(("ppl", "kl"), scores["before"])),
                  "heldout_after": dict(zip(("ppl", "kl"), scores["after"])), "heldout_unpruned_ppl": scores["unpruned"],
                  "heldout_change": change_record(scores["change"], scores["sequences"]),
                  "transform": TRANSFORM_FILE, "exported_from": record and str(config.model.model)}
        progress(OUTPUTS_STAGE, 0, 3)
        saved = save_merged(folder, config, probe, student, data, ids, record, healed, progress)
    table = heal_table([row(0, float("nan"), float("nan"), scores["before"]),
                        row(1, float("nan"), float("nan"), scores["after"], scores["change"])])
    details = {"objective": None, "steps": config.cosine_steps if config.method == "cosine" else 0,
               "lr": config.cosine_lr if config.method == "cosine" else None, "lora_rank": None, "lora_alpha": None,
               "lora_targets": None, "tail_blocks": None, "adapter": None,
               "trainable_parameters": sum(int(T.numel()) for T in repaired.transforms.values()),
               "train_tokens": tokens, "train_sequences": calibration["sequences"], "ridge": config.ridge,
               "calibration": calibration, "transform": TRANSFORM_FILE,
               "cosine_kept_lstsq": kept, "repair_seconds": round(repaired.seconds, 3)}
    return details, saved, table, (f"{config.method} replacement of each removed run", 0.0)


@takes(HealConfig, "layerprobe.heal")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_heal(config: HealConfig, progress: Progress = silent) -> RunResult:
    """Remove, repair (--method), score before and after, write the run folder (see the module's docstring)."""
    started, clock = start_time(), time.perf_counter()
    _checks(config)
    spec, remove, record = removal_source(config)
    out = Path(COMMAND.out(config, spec))
    check_out_apart(out, {"the model": spec if spec and Path(spec).is_dir() else None,
                          "the --from-curve run": config.from_curve})
    if config.resume:
        check_resume(out, COMMAND, config)
    elif config.overwrite:  # refused before the model loads, not after
        check_owned(out, COMMAND, "--overwrite")
    model_options = dataclasses.replace(config.model, model=spec)
    if record is None and not config.from_curve and isinstance(remove, str):  # a range outside: refused before the load
        refuse_ranges_early(model_options, remove=remove)
    corpus = preflight(model_options, config.data, head="causal-lm")[0]
    probe = open_probe(model_options, config.data, head="causal-lm", checked=(corpus,))
    ids = _check_source(config, record, probe.loaded, len(probe.stack))
    if ids is None:
        ids = parse_remove(remove if isinstance(remove, str) else ",".join(map(str, remove)), len(probe.stack),
                           config.from_curve, config.strategy)
    replacing = config.method in REPLACEMENTS
    if replacing:
        fold_targets(probe.model, probe.stack, ids)  # an inexact fold is refused before anything is written
    if is_encoder(probe.model):
        raise ConfigError(f"heal trains a causal language model and '{spec}' is an encoder: pass a decoder model.")
    data = load_data(config, probe, config.calibration_tokens if replacing else None)
    folder = prepare_run_dir(out, config.overwrite, config.resume, COMMAND)
    with probe.loaded.as_saved():  # the copy keeps the checkpoint's own config (use_cache) for the merged save
        student = copy.deepcopy(probe.model)
    method = _replaced if replacing else _trained
    details, saved, table, (what, before) = method(config, probe, student, ids, data, folder, record, progress)
    facts = probe.facts()
    seconds = time.perf_counter() - clock + before
    summary = heal_summary(config, probe, facts, ids, details, saved, seconds)
    title = (f"{model_label(spec)} without {summary['removed']} ({len(ids)} of {len(probe.stack)} layers removed): "
             f"{what}")
    figure = heal_plot(table, title, summary.get("heldout_unpruned_ppl"))
    result = write_run(folder, COMMAND, tables={"heal": table}, figures={"heal": figure}, summary=summary,
                       config=config, started=started, seconds=seconds, facts=facts, formats=config.formats,
                       warnings=probe.warnings)
    (folder / PassCheckpoint.FILE).unlink(missing_ok=True)  # the training's save, once the run is whole
    return result
