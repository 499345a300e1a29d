"""A GGUF file without some blocks, as llama.cpp loads it: the kept blocks' tensors copied byte for byte in their own
quantization types and renumbered blk.0..K-1, `<arch>.block_count = K`, every per-layer metadata array cut to the
kept layers with its element type, the rest (tokenizer, chat template, alignment) carried as it was.

llama.cpp reads some per-layer facts from arrays of one entry per block (head_count_kv, feed_forward_length, ...)
and derives others from the block's index when no array is given: Gemma 2 and 3 mark every 2nd / 6th layer as full
attention. A cut moves the kept layers' indices, so for those architectures the kept layers' own kinds are written
out as the `<arch>.attention.sliding_window_pattern` bool array (one entry per block, true = sliding window), which
llama.cpp's loader reads before falling back to the period.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import ArchitectureError, ModelLoadError, RunError, first_line

MARK = "layerprobe.removal"  # a JSON string in the written file's metadata: what was removed (and that we wrote it)
BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")
# general.architecture -> the period of llama.cpp's implicit sliding-window pattern (0: none); an architecture not
# here has per-layer facts layerprobe does not know how to cut, and is refused
ARCHITECTURES = {"llama": 0, "qwen2": 0, "qwen3": 0, "gemma": 0, "gemma2": 2, "gemma3": 6}
PATTERN = "attention.sliding_window_pattern"


@dataclass
class PrunedGGUF:
    """What prune_gguf wrote."""

    architecture: str
    block_count: int  # after the cut
    source_block_count: int
    tensors: int  # tensors written, all copied byte for byte
    cut_arrays: list[str] = field(default_factory=list)  # per-layer metadata arrays cut to the kept layers
    pattern_written: list[bool] | None = None  # the sliding-window pattern made explicit (True = sliding window)
    quantization: str = ""  # the tensor types, as read_header names them


def _value(fld: Any) -> Any:
    """A reader field's value: a scalar, a string, or a list (arrays)."""
    return fld.contents()


def is_sliding(architecture: str, reader: Any, index: int) -> bool:
    """llama.cpp's implicit sliding-window kind of block `index` (llama_hparams::set_swa_pattern, dense last)."""
    period = ARCHITECTURES[architecture]
    window = reader.fields.get(f"{architecture}.attention.sliding_window")
    if architecture == "gemma3" and (window is None or not _value(window)):
        return False  # Gemma 3 without a window: every layer full
    given = reader.fields.get(f"{architecture}.{PATTERN}")
    if given is not None and len(given.types) == 1:  # a scalar period overrides the default; 0: all sliding
        period = int(_value(given))
        return period == 0 or index % period < period - 1
    return period > 0 and index % period < period - 1


def source_layout(reader: Any) -> tuple[str, int]:
    """(architecture, block_count) of a parsed GGUF, refusing an architecture whose per-layer facts are unknown."""
    architecture = _value(reader.fields["general.architecture"])
    if architecture not in ARCHITECTURES:
        raise ArchitectureError(f"GGUF architecture '{architecture}' has per-layer metadata layerprobe does not know "
                                f"how to cut (it knows {', '.join(ARCHITECTURES)}): export --format hf instead.")
    count = reader.fields.get(f"{architecture}.block_count")
    if count is None:
        raise ModelLoadError(f"The GGUF has no {architecture}.block_count: it is not a complete model file.")
    return architecture, int(_value(count))


def per_layer_arrays(reader: Any, architecture: str, block_count: int) -> list[str]:
    """The metadata keys that hold one entry per block: the architecture's arrays as long as block_count."""
    from gguf import GGUFValueType

    return [key for key, fld in reader.fields.items()
            if key.startswith(f"{architecture}.") and fld.types and fld.types[0] == GGUFValueType.ARRAY
            and len(fld.data) == block_count]


def prune_gguf(source: Path, keep: list[int], target: Path, record: dict) -> PrunedGGUF:
    """Write `source` with only the `keep` blocks (0-based, ascending) to `target`; `record` is stored as the
    layerprobe.removal key (JSON)."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    architecture, count = source_layout(reader)
    if not keep:
        raise RunError("The removal leaves no blocks: keep at least one; nothing written.")
    if keep[-1] >= count:
        raise RunError(f"Block {keep[-1]} is past the GGUF's {count} blocks: nothing written.")
    arrays = per_layer_arrays(reader, architecture, count)
    writer = gguf.GGUFWriter(str(target), architecture)
    alignment = reader.fields.get("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(_value(alignment))
    pattern = None
    for key, fld in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", MARK):
            continue
        kind = gguf.GGUFValueType(fld.types[0])
        sub = gguf.GGUFValueType(fld.types[-1]) if kind == gguf.GGUFValueType.ARRAY else None
        value = _value(fld)
        if key == f"{architecture}.block_count":
            value = len(keep)
        elif key in arrays:
            value = [value[i] for i in keep]
        elif key == f"{architecture}.{PATTERN}":  # a scalar period: written out below as the kept layers' kinds
            continue
        writer.add_key_value(key, value, kind, sub)
    if f"{architecture}.{PATTERN}" not in arrays and any(is_sliding(architecture, reader, i) for i in range(count)):
        pattern = [is_sliding(architecture, reader, i) for i in keep]
        writer.add_key_value(f"{architecture}.{PATTERN}", pattern, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    writer.add_key_value(MARK, json.dumps(record, sort_keys=True), gguf.GGUFValueType.STRING)
    new_index = {old: new for new, old in enumerate(keep)}
    written = 0
    for tensor in reader.tensors:
        name = renamed(tensor.name, new_index)
        if name is None:
            continue
        # the raw bytes in their own type: a quantized tensor is uint8 rows the writer turns back into its shape
        writer.add_tensor(name, tensor.data, raw_shape=None if tensor.data.dtype == "uint8" else tensor.data.shape,
                          raw_dtype=tensor.tensor_type)
        written += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    types = sorted({t.tensor_type.name for t in reader.tensors})
    return PrunedGGUF(architecture, len(keep), count, written, sorted(arrays), pattern, "+".join(types))


def renamed(name: str, new_index: dict[int, int]) -> str | None:
    """A tensor's name in the cut file: blk.<old> becomes blk.<new>, a removed block's tensor None, others as they are."""
    match = BLOCK.match(name)
    if match is None:
        return name
    old = int(match.group(1))
    return f"blk.{new_index[old]}.{match.group(2)}" if old in new_index else None


def check_written(target: Path, source: Path, keep: list[int]) -> dict:
    """Reopen the written file with gguf's reader and check it against the source: block_count is len(keep), every
    per-layer array of the source is cut to the kept entries with its element type, the blocks are blk.0..K-1
    without gaps, each kept tensor has its source's type, shape and bytes, the header's tensor count and the
    alignment hold. Raises RunError naming the first mismatch; returns what was checked."""
    import gguf
    import numpy as np

    try:
        got = gguf.GGUFReader(str(target))
    except Exception as exc:  # the parser's own error types
        raise RunError(f"The written GGUF does not parse ({first_line(exc)}): not exported; please report this.") from None
    src = gguf.GGUFReader(str(source))
    architecture, count = source_layout(src)
    problems = []
    if int(_value(got.fields[f"{architecture}.block_count"])) != len(keep):
        problems.append(f"{architecture}.block_count is not {len(keep)}")
    arrays = per_layer_arrays(src, architecture, count)
    for key in arrays:
        mine = got.fields.get(key)
        want = [_value(src.fields[key])[i] for i in keep]
        if mine is None or list(mine.types) != list(src.fields[key].types) or _value(mine) != want:
            problems.append(f"{key} is not the kept layers' entries")
    pattern = got.fields.get(f"{architecture}.{PATTERN}")
    if pattern is not None and pattern.types[0] == gguf.GGUFValueType.ARRAY and len(pattern.data) != len(keep):
        problems.append(f"{architecture}.{PATTERN} has {len(pattern.data)} entries for {len(keep)} blocks")
    if int(_value(got.fields["GGUF.tensor_count"])) != len(got.tensors):
        problems.append("the header's tensor count differs from the tensors listed")
    blocks = sorted({int(m.group(1)) for t in got.tensors if (m := BLOCK.match(t.name))})
    if blocks != list(range(len(keep))):
        problems.append(f"the blocks are {blocks[:3]}...{blocks[-3:]}, not blk.0..{len(keep) - 1}")
    new_index = {old: new for new, old in enumerate(keep)}
    wanted = {n: t for t in src.tensors if (n := renamed(t.name, new_index)) is not None}
    mine = {t.name: t for t in got.tensors}
    if set(mine) != set(wanted):
        problems.append(f"the tensors differ from the kept ones: {sorted(set(mine) ^ set(wanted))[:3]}")
    for name in sorted(set(mine) & set(wanted)):
        a, b = mine[name], wanted[name]
        if a.tensor_type != b.tensor_type or list(a.shape) != list(b.shape) or not np.array_equal(
                np.asarray(a.data).view(np.uint8), np.asarray(b.data).view(np.uint8)):
            problems.append(f"tensor {name} is not its source's bytes")
            break
        if a.data_offset % got.alignment:
            problems.append(f"tensor {name} is not aligned to {got.alignment} bytes")
            break
    if got.alignment != src.alignment:
        problems.append(f"alignment {got.alignment} is not the source's {src.alignment}")
    if problems:
        raise RunError(f"The written GGUF fails its check ({problems[0]}): not exported; please report this.")
    return {"block_count": len(keep), "per_layer_arrays": arrays, "tensors": len(got.tensors),
            "alignment": got.alignment, "tensors_byte_identical": len(mine)}


def gguf_layer_kinds(path: Path) -> list[str] | None:
    """The attention kind of each block as the written pattern says (transformers' layer_types names), or None
    when the file has no pattern array: transformers' GGUF loader does not read it, so verification passes it."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    architecture = _value(reader.fields["general.architecture"])
    fld = reader.fields.get(f"{architecture}.{PATTERN}")
    if fld is None or fld.types[0] != gguf.GGUFValueType.ARRAY:
        return None
    return ["sliding_attention" if v else "full_attention" for v in _value(fld)]


def written_by_layerprobe(path: Path) -> bool:
    """Whether an existing .gguf file carries layerprobe's removal record (an earlier export wrote it)."""
    try:
        import gguf

        return MARK in gguf.GGUFReader(str(path)).fields
    except Exception:  # not a GGUF, unreadable: not ours
        return False
