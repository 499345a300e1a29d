"""export --format gguf: the pruned model as a GGUF file llama.cpp loads, checked before it is published.

A GGUF source: the kept blocks are copied byte for byte in their own quantization types (nothing is requantized).
A transformers source (a folder, an export, a heal run's merged/): the shortened model is converted as llama.cpp's
own converter converts it (models/gguf_convert.py), its matrices in --gguf-type (F32, F16 or BF16), norms and biases
in F32; where the folder was itself read from a quantized GGUF, the summary says which tensors changed type. Before
the file is published it is reopened with gguf's reader (block_count, every per-layer array, the tensors) and
loaded with transformers' GGUF loader, whose logits on the timing batch must match the model pruned in place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerprobe.errors import ArchitectureError, ConfigError, RunError
from layerprobe.models.gguf_write import (ARCHITECTURES, check_written, gguf_layer_kinds, prune_gguf,
                                          written_by_layerprobe)

GGUF_NAME = "model.gguf"  # the file's name inside an --out folder
DEFAULT_TYPE = "f16"  # --gguf-type's default, as llama.cpp's converter's
# the largest |logit difference| the transformers reload of a converted file may show against the pruned model
# (float32), by the type its matrices were written in (f32: the export's own tolerance, measured 0). Measured
# (reports/examples/gguf-export, logits of magnitude ~20-50): F16 0.026 (SmolLM2 -12-15,25, 64 positions), 0.07 (the
# same, 128 positions), 0.047 (Gemma 3 -3-4, 64 positions); BF16 0.20 (SmolLM2, 64 positions)
TOLERANCES = {"f16": 0.25, "bf16": 1.0}


def check_gguf_request(formats: tuple[str, ...], out_arg: str, part: str, kind: str, source: Path | None,
                       overwrite: bool, gguf_type: str | None = None) -> None:
    """--format gguf refused before anything loads: a sub-layer removal, a local transformers model of an
    architecture without a GGUF mapping, a GGUF of an architecture whose per-layer metadata is unknown, --gguf-type
    with a GGUF source, a .gguf --out that is not ours to replace."""
    if "gguf" not in formats:
        if out_arg.lower().endswith(".gguf"):
            raise ConfigError(f"--out '{out_arg}' names a .gguf file: pass --format gguf, or a folder for --format hf.")
        return
    if part != "block":
        raise ConfigError(f"--format gguf writes whole-block removals only: drop --part {part}, or use --format hf.")
    if kind != "gguf" or source is None:
        model_type = _model_type(source / "config.json") if source is not None else None
        if model_type is not None:  # a local folder: refused before loading (a hub model: once its config loads)
            from layerprobe.models.gguf_convert import mapping_for

            mapping_for(model_type)
        return _check_out_file(formats, out_arg, overwrite, source)
    if gguf_type is not None:
        raise ConfigError(f"--gguf-type {gguf_type} does nothing with a GGUF source: its kept blocks are copied in "
                          "their own types; drop --gguf-type.")
    from layerprobe.models.gguf import read_header

    architecture = read_header(source).architecture
    if architecture not in ARCHITECTURES:
        raise ArchitectureError(f"GGUF architecture '{architecture}' has per-layer metadata layerprobe does not know "
                                f"how to cut (it knows {', '.join(ARCHITECTURES)}): export --format hf instead.")
    _check_out_file(formats, out_arg, overwrite, source)


def _model_type(config_file: Path) -> str | None:
    """The model_type a checkpoint's config.json names (None when there is none to read: the load says why)."""
    try:
        found = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _check_out_file(formats: tuple[str, ...], out_arg: str, overwrite: bool, source: Path | None) -> None:
    """A .gguf --out: --format gguf alone, never the source."""
    if out_arg.lower().endswith(".gguf"):
        if formats != ("gguf",):
            raise ConfigError(f"--out '{out_arg}' is one .gguf file: --format {','.join(formats)} needs a folder.")
        if source is not None and guard_gguf_file(out_arg, overwrite) == source.resolve():
            raise RunError(f"--out '{out_arg}' is the source model: pass a new path; the source is never replaced.")


def guard_gguf_file(out_arg: str, overwrite: bool) -> Path:
    """A .gguf --out: never a link or a folder; an existing file only with --overwrite, and only one that
    layerprobe wrote (its layerprobe.removal key)."""
    given = Path(out_arg).expanduser()
    if given.is_symlink():
        raise RunError(f"--out '{out_arg}' is a symbolic link (to '{given.resolve()}'): pass the real path.")
    out = given.resolve()
    if out.is_dir():
        raise RunError(f"--out '{out_arg}' is a folder: pass a new .gguf file path, or a folder without .gguf.")
    if out.exists():
        if not overwrite:
            raise RunError(f"--out '{out_arg}' exists: pass another path, or --overwrite to replace an earlier export.")
        if not written_by_layerprobe(out):
            raise RunError(f"--out '{out_arg}' was not written by layerprobe export (no layerprobe.removal key): "
                           "--overwrite only replaces an earlier export; pass another path.")
    return out


def write_gguf(loaded: Any, keep: list[int], target: Path, want: Any, batch: Any, tolerance: float,
               record: dict, verify: bool, name: str) -> dict:
    """The cut GGUF at `target` (published as `name`), checked against its source and, with `verify`, reloaded with transformers' GGUF
    loader and compared with `want` (the pruned model's output on `batch`). What was written and checked."""
    source = Path(loaded.gguf["file"])
    done = prune_gguf(source, keep, target, record)
    checked = check_written(target, source, keep)
    difference = reload_difference(target, want, batch) if verify else None
    if difference is not None and not difference <= tolerance:
        raise RunError(f"The exported GGUF loaded with transformers differs from the pruned model by {difference:.3g} "
                       f"(tolerance {tolerance:g}): not exported; please report this architecture "
                       f"({done.architecture}).")
    return {"file": name, "architecture": done.architecture, "block_count": done.block_count,
            "source_block_count": done.source_block_count, "source_file": str(source),
            "quantization": done.quantization, "tensors": done.tensors, "tensors_copied_byte_for_byte": done.tensors,
            "tensors_changed_type": [], "tensor_types_changed": {}, "converted_from": "gguf", "gguf_type": None,
            "per_layer_arrays_cut": done.cut_arrays,
            "sliding_window_pattern_written": done.pattern_written, "checked": checked,
            "verified_max_difference": difference, "verified_with": "transformers GGUF loader (gguf_file=)",
            "tolerance": tolerance}


def write_converted(loaded: Any, model: Any, kinds: list[str], target: Path, gguf_type: str | None, record: dict,
                    name: str) -> Any:
    """The shortened transformers `model` (called inside the removal) converted to `target`; what was written."""
    from layerprobe.models.gguf_convert import convert_to_gguf

    return convert_to_gguf(model, loaded.tokenizer, target, gguf_type or DEFAULT_TYPE, kinds, record,
                           Path(str(loaded.spec)).name or str(loaded.spec))


def check_converted_file(loaded: Any, converted: Any, keep: list[int], source_blocks: int, target: Path, want: Any,
                         batch: Any, gguf_type: str | None, tolerance: float | None, f32_tolerance: float,
                         verify: bool, name: str) -> dict:
    """The converted file reopened with gguf's reader and, with `verify`, reloaded with transformers' GGUF loader
    against `want` within the type's tolerance; the summary's gguf_export record."""
    from layerprobe.models.gguf_convert import check_converted

    kind = gguf_type or DEFAULT_TYPE
    checked = check_converted(target, converted)
    limit = tolerance if tolerance is not None else f32_tolerance if kind == "f32" else TOLERANCES[kind]
    difference = reload_difference(target, want, batch) if verify else None
    if difference is not None and not difference <= limit:
        raise RunError(f"The exported GGUF ({kind}) loaded with transformers differs from the pruned model by "
                       f"{difference:.3g} (tolerance {limit:g}): not exported; pass --gguf-type f32, or please report "
                       f"this architecture ({converted.architecture}).")
    counts: dict[str, int] = {}
    for written in converted.tensor_types.values():
        counts[written] = counts.get(written, 0) + 1
    return {"file": name, "architecture": converted.architecture, "block_count": converted.block_count,
            "source_block_count": source_blocks, "source_file": None,
            "converted_from": "transformers", "gguf_type": kind.upper(),
            "quantization": "+".join(sorted(counts)), "tensors": len(converted.tensor_types),
            "tensors_copied_byte_for_byte": 0, "tensors_by_type": counts,
            **_origin_changes(loaded, keep, source_blocks, converted),
            "per_layer_arrays_cut": [], "sliding_window_pattern_written": converted.pattern_written,
            "checked": checked, "verified_max_difference": difference,
            "verified_with": "transformers GGUF loader (gguf_file=)", "tolerance": limit}


def _origin_changes(loaded: Any, keep: list[int], source_blocks: int, converted: Any) -> dict:
    """Where the transformers folder was read from a quantized GGUF (an export's or heal merged/'s record names
    it): the tensors whose type the conversion changed, against that file; otherwise none changed type (the
    folder's own weights were floats)."""
    from layerprobe.removal import REMOVAL_FILE

    none = {"origin_gguf": None, "tensors_changed_type": [], "tensor_types_changed": {}}
    if loaded.path is None or not (loaded.path / REMOVAL_FILE).is_file():
        return none
    try:
        record = json.loads((loaded.path / REMOVAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return none
    facts = record.get("gguf") if isinstance(record, dict) else None
    origin = facts.get("file") if isinstance(facts, dict) else None
    kept = record.get("kept") if isinstance(record, dict) else None
    if not isinstance(origin, str) or not isinstance(kept, list) or len(kept) != source_blocks:
        return none  # not read from a GGUF, or a record that does not describe this folder's blocks
    if not Path(origin).is_file():
        return {**none, "origin_gguf": origin, "tensors_changed_type": None, "tensor_types_changed": None}
    from layerprobe.models.gguf_convert import type_changes

    return {"origin_gguf": origin, **type_changes(Path(origin), [kept[i] for i in keep], converted.tensor_types)}


def reload_difference(path: Path, want: Any, batch: Any) -> float:
    """Largest |logit difference| between `want` and the GGUF loaded by transformers (float32), its layer kinds
    taken from the file's sliding-window pattern, which transformers' GGUF loader does not read."""
    import torch
    import transformers

    from layerprobe.removal import output

    where, name = str(path.parent), path.name
    config = transformers.AutoConfig.from_pretrained(where, gguf_file=name)
    kinds = gguf_layer_kinds(path)
    if kinds is not None and hasattr(config, "layer_types"):
        config.layer_types = kinds
    if getattr(config, "model_type", None) == "gemma3_text":  # not in the file: llama.cpp scales by 1/sqrt(head_dim)
        config.query_pre_attn_scalar = config.head_dim
    model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config,
                                                              dtype=torch.float32).eval().to(batch.device)
    return float((want.float() - output(model, batch).float()).abs().max())
