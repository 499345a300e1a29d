"""What a healing run leaves: adapter/ (peft's own save), merged/ (a plain transformers checkpoint with the export
contract: layerprobe-removal.json, gaining a `healing` record), heal.csv's table and summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from layerprobe.config import REPLACEMENTS, ExportConfig, HealConfig
from layerprobe.data.packing import max_sequence_length
from layerprobe.errors import RunError
from layerprobe.evaluation.variants import ranges_label
from layerprobe.files import publishing
from layerprobe.models.gain import measure_gain
from layerprobe.progress import Progress, announce
from layerprobe.removal import REMOVAL_FILE, removal_record, verify_reload
from layerprobe.repair.change import change_record, sequences
from layerprobe.repair.loop import Healing, Models, unpruned_ppl
from layerprobe.commands.heal import HEAL
from layerprobe.runs.columns import names
from layerprobe.runs.folder import atomic_write_bytes, atomic_write_text, note_written, run_files

ADAPTER, MERGED = "adapter", "merged"
TRANSFORM_FILE = "transform.safetensors"  # --method lstsq|cosine: every map T, float64, keyed by its run (12-18)


def write_transforms(path: Path, transforms: dict, facts: dict) -> None:
    """Every fitted map (run label -> T, (d, d) float64; the shortened model computes x - m + m T), atomically."""
    from safetensors.torch import save

    metadata = {key: json.dumps(value) for key, value in facts.items()}
    atomic_write_bytes(path, save({label: T.contiguous().cpu() for label, T in transforms.items()}, metadata=metadata))


def heal_table(rows: list[dict]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows, columns=names(HEAL))


def _publish(target: Path, write: Callable[[Path], None]) -> None:
    """Write a folder into a private sibling, then rename it into place (files.publishing): `target` is always
    whole."""
    try:
        with publishing(target, folder=True) as partial:
            write(partial)
            for file in partial.rglob("*"):
                if file.is_file():
                    note_written(target / file.relative_to(partial))  # the run folder's record names it (check_owned)
    except OSError as exc:
        raise RunError(f"Cannot write '{target}' ({exc.strerror or exc}): free space on that disk or pass another "
                       "--out.") from None


def _gain(config: HealConfig, probe: Any, ids: list[int]) -> dict | None:
    """export's gain (models/gain.py) on the unpruned model with the same blocks removed, at export's defaults;
    None where --no-gain, or by default for the replacement methods (--gain times them too)."""
    import torch

    if not (config.gain if config.gain is not None else config.method not in REPLACEMENTS):
        return None
    timing = ExportConfig()
    longest = max_sequence_length(probe.model, probe.tokenizer)
    length = min(timing.timing_seq_len, longest) if longest else timing.timing_seq_len
    vocab = probe.model.get_input_embeddings().num_embeddings
    batch = torch.randint(0, vocab, (timing.timing_batch, length), generator=torch.Generator().manual_seed(0))
    return measure_gain(probe.model, probe.stack, ids, batch.to(probe.device), timing.timing_repeats, "block",
                        timing.timing_new_tokens, longest)


OUTPUTS_STAGE = "heal outputs (files written)"  # the progress stage of the saves


def save_outputs(folder: Path, config: HealConfig, probe: Any, models: Models, data: Any, ids: list[int],
                 record: dict | None, healing: Healing, progress: Progress) -> dict:
    """Trained healings (lora, tail): adapter/ (LoRA only), then merged/ (save_merged)."""
    progress(OUTPUTS_STAGE, 0, 3)
    trainable = sum(p.numel() for p in models.student.parameters() if p.requires_grad)
    lora = config.method == "lora"
    if lora:
        announce(f"writing {folder / ADAPTER}")
        models.student.peft_config["default"].base_model_name_or_path = None  # the base is the shortened model
        _publish(folder / ADAPTER, models.student.save_pretrained)
    progress(OUTPUTS_STAGE, 1, 3)
    merged = (models.student.merge_and_unload() if config.merged else models.student) if lora else models.student
    rows = [r for r in healing.rows if r["heldout_ppl"] == r["heldout_ppl"]]
    healed = {"method": config.method, "objective": config.objective, "steps": config.steps, "lr": config.lr,
              "lora_rank": config.lora_rank if lora else None, "lora_alpha": config.lora_alpha if lora else None,
              "tail_blocks": None if lora else config.tail_blocks, "trainable_parameters": trainable,
              "dataset": probe.corpus.description,
              "heldout_before": {"ppl": rows[0]["heldout_ppl"], "kl": rows[0]["heldout_kl"]},
              "heldout_after": {"ppl": rows[-1]["heldout_ppl"], "kl": rows[-1]["heldout_kl"]},
              "heldout_change": change_record(healing.change, sequences(healing.baseline)),
              "heldout_unpruned_ppl": unpruned_ppl(models, data, progress), "adapter": ADAPTER if lora else None,
              "exported_from": record and str(config.model.model)}
    return {"trainable": trainable, **save_merged(folder, config, probe, merged, data, ids, record, healed, progress)}


def folder_bytes(path: Path) -> int:
    """The bytes of every file under `path`."""
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def save_merged(folder: Path, config: HealConfig, probe: Any, merged: Any, data: Any, ids: list[int],
                record: dict | None, healed: dict, progress: Progress) -> dict:
    """merged/ (verified by a plain transformers reload), its record with the `healing` record, and the gain; with
    --no-merged only the gain (nothing saved, nothing to reload)."""
    import torch

    if not config.merged:
        progress(OUTPUTS_STAGE, 2, 3)
        gain = _gain(config, probe, ids)
        progress(OUTPUTS_STAGE, 3, 3)
        return {"difference": None, "gain": gain, "healing": healed, "merged_bytes": None}
    batch = data.heldout[0].input_ids.to(probe.device)
    with torch.inference_mode():
        want = merged(input_ids=batch, use_cache=False).logits

    def write_merged(partial: Path) -> None:
        merged.save_pretrained(partial)
        if probe.tokenizer is not None:
            probe.tokenizer.save_pretrained(partial)

    announce(f"writing {folder / MERGED} (a full checkpoint; --no-merged skips it) and reloading it to verify")
    _publish(folder / MERGED, write_merged)
    head_class = type(merged).__name__
    difference = verify_reload(folder / MERGED, want, head_class, batch, next(merged.parameters()).dtype)
    progress(OUTPUTS_STAGE, 2, 3)
    gain = _gain(config, probe, ids)
    removal = removal_record(probe.loaded, probe.stack, ids, "block", [], config.from_curve, config.strategy,
                             difference, gain)
    removal["files"] = sorted({*run_files(folder / MERGED), REMOVAL_FILE})  # what an export --overwrite may replace
    # the healing record's paths (transform, adapter) are relative to the run folder, merged/'s parent
    atomic_write_text(folder / MERGED / REMOVAL_FILE, json.dumps({**removal, "healing": healed}, indent=2) + "\n")
    progress(OUTPUTS_STAGE, 3, 3)
    return {"difference": difference, "gain": gain, "healing": healed, "merged_bytes": folder_bytes(folder / MERGED)}


def heal_summary(config: HealConfig, probe: Any, facts: dict, ids: list[int], details: dict, saved: dict,
                 seconds: float) -> dict:
    """summary.json (runs/schema.py, heal): what every method writes, and the method's own `details`; its paths
    (merged, adapter, transform) are relative to the run folder."""
    healed = saved["healing"]
    return {**facts, "dataset": probe.corpus.description, "tokens": config.data.tokens,
            "seq_len": probe.seq_len, "batch_size": config.data.batch_size, "removed": ranges_label(ids),
            "removed_layers": ids, "num_layers_healed": len(probe.stack) - len(ids), "method": config.method,
            **details, "heldout_before": healed["heldout_before"], "heldout_after": healed["heldout_after"],
            "heldout_unpruned_ppl": healed["heldout_unpruned_ppl"],
            "heldout_change": healed["heldout_change"], "merged": MERGED if config.merged else None,
            "merged_bytes": saved["merged_bytes"], "verified_max_difference": saved["difference"],
            "gain": saved["gain"], "from_curve": config.from_curve,
            "strategy": config.strategy if config.from_curve else None, "exported_from": healed["exported_from"],
            "seconds": round(seconds, 3), "warnings": list(probe.warnings)}


def trained_details(config: HealConfig, probe: Any, targets: list[str], data: Any, trainable: int) -> dict:
    """heal_summary's details of lora and tail."""
    lora = config.method == "lora"
    return {"objective": config.objective, "steps": config.steps, "lr": config.lr,
            "lora_rank": config.lora_rank if lora else None, "lora_alpha": config.lora_alpha if lora else None,
            "lora_targets": sorted({t.rsplit(".", 1)[-1] for t in targets}) if lora else None,
            "tail_blocks": None if lora else config.tail_blocks, "trainable_parameters": trainable,
            "train_tokens": config.steps * config.data.batch_size * probe.seq_len,
            "train_sequences": int(data.train.shape[0] * data.train.shape[1]),
            "adapter": ADAPTER if lora else None}
