"""export --format gguf: the pruned model as a GGUF file llama.cpp loads, checked before it is published.

The source must be a GGUF (the kept blocks are copied byte for byte in their own quantization types: nothing is
requantized). Before the file is published it is reopened with gguf's reader (block_count, every per-layer array,
the tensors against the source's bytes) and loaded with transformers' GGUF loader, whose logits on the timing batch
must match the model pruned in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerprobe.errors import ArchitectureError, ConfigError, RunError
from layerprobe.models.gguf_write import (ARCHITECTURES, check_written, gguf_layer_kinds, prune_gguf,
                                          written_by_layerprobe)

GGUF_NAME = "model.gguf"  # the file's name inside an --out folder


def check_gguf_request(formats: tuple[str, ...], out_arg: str, part: str, kind: str, source: Path | None,
                       overwrite: bool) -> None:
    """--format gguf refused before anything loads: a sub-layer removal, a transformers source, a GGUF of an
    architecture whose per-layer metadata is unknown, a .gguf --out that is not ours to replace."""
    if "gguf" not in formats:
        if out_arg.lower().endswith(".gguf"):
            raise ConfigError(f"--out '{out_arg}' names a .gguf file: pass --format gguf, or a folder for --format hf.")
        return
    if part != "block":
        raise ConfigError(f"--format gguf writes whole-block removals only: drop --part {part}, or use --format hf.")
    if kind != "gguf" or source is None:
        raise ArchitectureError("--format gguf needs a GGUF source (its kept blocks are copied byte for byte); this "
                                "model is a transformers checkpoint: export --format hf and convert that folder with "
                                "llama.cpp's convert_hf_to_gguf.py.")
    from layerprobe.models.gguf import read_header

    architecture = read_header(source).architecture
    if architecture not in ARCHITECTURES:
        raise ArchitectureError(f"GGUF architecture '{architecture}' has per-layer metadata layerprobe does not know "
                                f"how to cut (it knows {', '.join(ARCHITECTURES)}): export --format hf instead.")
    if out_arg.lower().endswith(".gguf"):
        if formats != ("gguf",):
            raise ConfigError(f"--out '{out_arg}' is one .gguf file: --format {','.join(formats)} needs a folder.")
        if guard_gguf_file(out_arg, overwrite) == source.resolve():
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
            "tensors_changed_type": [], "per_layer_arrays_cut": done.cut_arrays,
            "sliding_window_pattern_written": done.pattern_written, "checked": checked,
            "verified_max_difference": difference, "verified_with": "transformers GGUF loader (gguf_file=)",
            "tolerance": tolerance}


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
    model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config,
                                                              dtype=torch.float32).eval().to(batch.device)
    return float((want.float() - output(model, batch).float()).abs().max())
