"""What a checkpoint given as MODEL already is (issue 47, rule 1): an export (its layerprobe-removal.json), a heal
run's merged/ (the same record with a `healing` record), or a run folder rather than a model. export and heal say it
before they load anything, and then refuse or build on it (docs/errors.md, "A checkpoint layerprobe made"):

- export of an export or of a healed merged/ builds on that checkpoint: --remove numbers its blocks, the notice says
  which blocks of the original they are, and the new record names its source's removal and the original's blocks
  removed in all (`source_removal`, `original`);
- export --from-curve of an export, with a curve run on the export's source, is refused: the curve numbers the
  source's blocks, not the export's;
- heal of a healed merged/ is refused (its record would re-heal the original); heal of an export with --remove too is
  refused (the record already says what to remove); heal of an export whose source is itself an export builds on
  that source, as its record says, and says so;
- a run folder given as MODEL is named as the run it is, with its merged/ checkpoint (runs/folder.run_folder_note).
"""

from __future__ import annotations

from pathlib import Path

from layerprobe.errors import RunError
from layerprobe.evaluation.variants import ranges_label
from layerprobe.removal import REMOVAL_FILE, read_removal


def removal_of(spec: str | None) -> dict | None:
    """MODEL's layerprobe-removal.json, checked (read_removal: one line naming the file and the key), when MODEL is
    a local folder holding one; else None."""
    if not spec or not (Path(spec).expanduser() / REMOVAL_FILE).is_file():
        return None
    return read_removal(Path(spec).expanduser() / REMOVAL_FILE)


def _blocks(ids: list) -> str:
    return f"block{'s' if len(ids) != 1 else ''} {ranges_label(ids)}"


def what_it_is(record: dict) -> str:
    """"an export of llama with blocks 2-3 removed (6 -> 4 blocks)", or a healed merged/'s equivalent."""
    part, removed = record.get("part"), record["removed"]
    what = (f"with {_blocks(removed)} removed" if part == "block" else
            f"with the {part} of {_blocks(removed)} zeroed")
    original = record.get("num_layers_original")
    if part == "block" and isinstance(original, int):
        what += f" ({original} -> {original - len(removed)} blocks)"
    origin = record.get("original")
    if isinstance(origin, dict) and origin.get("model") and origin.get("model") != record["source_model"]:
        what += f"; in all, {_blocks(origin.get('removed') or [])} of {origin['model']} are gone"
    healing = record.get("healing")
    if isinstance(healing, dict):
        return (f"the healed checkpoint (merged/ of a heal run, --method {healing.get('method')}) of "
                f"{record['source_model']} {what}")
    return f"an export of {record['source_model']} {what}"


def describe(spec: str, record: dict) -> str:
    """"'x' is an export of llama with blocks 2-3 removed (6 -> 4 blocks)"."""
    return f"'{spec}' is {what_it_is(record)}"


def original_blocks(record: dict) -> tuple[str, list[int], list[int]] | None:
    """(the original model, its blocks removed in all, the original id of each block this checkpoint has) for a
    checkpoint whose removals were all of whole blocks; None otherwise."""
    if record.get("part") != "block":
        return None
    origin = record.get("original")
    if isinstance(origin, dict) and isinstance(origin.get("kept"), list):
        return origin.get("model"), list(origin.get("removed") or []), list(origin["kept"])
    kept = record.get("kept")
    if not isinstance(kept, list) or not all(isinstance(i, int) for i in kept):
        return None
    return record["source_model"], sorted(record["removed"]), kept


def check_curve_numbering(from_curve: str, spec: str, record: dict, curve_weights: str | None) -> None:
    """--from-curve with MODEL an export of the model the curve ran on: refused, the curve numbers the source's
    blocks (with --allow-other-weights too)."""
    if record.get("part") == "block" and curve_weights and curve_weights == record.get("weights"):
        raise RunError(f"--from-curve '{from_curve}' was run on {record['source_model']}, and {describe(spec, record)}: "
                       f"the curve's block ids number the source's {record.get('num_layers_original')} blocks, not "
                       f"the export's; pass {record['source_model']} as MODEL, or run the curve on the export.")


def build_on(spec: str, record: dict, num_layers: int) -> str:
    """The notice of an export that builds on an export or a healed checkpoint."""
    blocks = original_blocks(record)
    mapping = ""
    if blocks and len(blocks[2]) == num_layers:
        mapping = (f" (block i here is block kept[i] of {blocks[0]}: "
                   + ", ".join(f"{i}->{k}" for i, k in enumerate(blocks[2])) + ")")
    return (f"{describe(spec, record)}: this export builds on it, --remove numbers its {num_layers} blocks 0.."
            f"{num_layers - 1}{mapping}, and layerprobe-removal.json names both removals.")


def lineage(record: dict, ids: list[int], part: str) -> dict:
    """The keys an export of an export adds to its record: its source's removal, and what is gone from the original
    in all (`original`: model, removed, kept; only when every removal was of whole blocks)."""
    source = {k: record.get(k) for k in ("source_model", "source_path", "weights", "part", "removed",
                                         "num_layers_original", "num_layers_exported")}
    if isinstance(record.get("healing"), dict):
        source["healing"] = {k: record["healing"].get(k) for k in ("method", "objective", "steps")}
    blocks = original_blocks(record)
    original = None
    if blocks and part == "block" and all(0 <= i < len(blocks[2]) for i in ids):
        model, gone, kept = blocks
        original = {"model": model, "removed": sorted({*gone, *(kept[i] for i in ids)}),
                    "kept": [k for i, k in enumerate(kept) if i not in ids]}
    return {"source_removal": source, "original": original}


def heal_refusal(spec: str, record: dict, given: str | None) -> str | None:
    """Why heal refuses MODEL that is a healed checkpoint, or an export given with --remove too (None: heal it)."""
    if isinstance(record.get("healing"), dict):
        blocks = original_blocks(record)
        model, gone = (blocks[0], blocks[1]) if blocks else (record["source_model"], record["removed"])
        return (f"{describe(spec, record)}, so it is already healed; its record would re-heal the original from "
                f"scratch. Heal the original again with `layerprobe heal {model} --remove {ranges_label(gone)}`, or "
                "evaluate the healed checkpoint as it is.")
    if given:  # "--remove 3" or "--from-curve RUN"
        return (f"{describe(spec, record)}, and its record says what to remove: drop {given} to heal that removal, "
                "or export it with the further removal first and heal that export.")
    return None
