"""Which blocks a removal takes out, and the record it leaves: the shared plumbing of export, heal and prune --curve.

- the blocks: `--remove 20-27` (parse_remove: 0-based, ranges inclusive), a curve run's choice (from_curve), or an
  export's layerprobe-removal.json (read_removal, check_record_ids);
- the weights: a record made from other weights than the loaded model's is refused (check_weights);
- the record: layerprobe-removal.json (removal_record) beside a shortened checkpoint, and the reload check that the
  checkpoint loads with plain transformers and gives the pruned model's outputs (verify_reload).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerprobe.errors import ArchitectureError, ConfigError, RunError, first_line
from layerprobe.evaluation.variants import parse_ranges, ranges_label
from layerprobe.models.gain import model_inputs
from layerprobe.models.surgery import check_indices

REMOVAL_FILE = "layerprobe-removal.json"
CONVENTION = ("block ids are 0-based; a range a-b in --remove includes both ends; mergekit's layer_range [a, b) "
              "is half-open (layers a..b-1)")


def parse_remove(spec: str, num_layers: int, from_curve: str | None = None, strategy: str = "") -> list[int]:
    """'20-27' or '3,7,9-11' -> sorted ids, each within the model; ranges include both ends. from_curve: the blocks
    are a curve run's choice (curve.csv's 'removed' of `strategy`), and a problem names that run, not --remove."""
    if not from_curve:
        return check_indices(parse_ranges(spec, num_layers, "--remove", "20-27 or 3,7,9-11"), num_layers)
    where = f"--from-curve '{from_curve}': curve.csv's 'removed' of the {strategy} curve"
    try:
        ids = parse_ranges(str(spec), max(num_layers, 4096), where, "3,7,9-11")  # its syntax; the model's range below
    except ConfigError as exc:
        raise RunError(f"{first_line(exc).rstrip('.')}; run `layerprobe prune --curve` again.") from None
    outside = [i for i in ids if i >= num_layers]
    if outside or len(ids) >= num_layers:
        raise RunError(f"{where} is {spec}, and the model it is applied to has {num_layers} blocks (0..{num_layers - 1})"
                       f"{'' if outside else ', keeping none'}: pass the model the curve was run on.")
    return ids


def from_curve(run_dir: str, strategy: str, k: int | None, command: str = "export") -> tuple[str, str, str]:
    """(model, removed label, part) of a curve run's choice for `strategy` at k (default: its largest k within
    the tolerance), for `command` (export, heal: the word its messages use)."""
    from layerprobe.runs.read import load_run

    folder = Path(run_dir)
    if not (folder / "curve.csv").is_file() or not (folder / "summary.json").is_file():
        raise RunError(f"--from-curve '{run_dir}' is not a finished curve run (no curve.csv and summary.json): pass "
                       "the --out of `layerprobe prune --curve`.")
    run = load_run(folder)  # finished and whole: a curve.csv cut inside a row is refused, never read
    summary, curve = run.summary, run.tables.get("curve")
    if summary.get("command") != "curve":
        raise RunError(f"--from-curve '{run_dir}' holds a {summary.get('command') or 'unknown'} run: pass the --out of "
                       "`layerprobe prune --curve`.")
    for key in ("model", "curve"):
        if not isinstance(summary.get(key), (str, dict)[key == "curve"]):
            raise RunError(f"'{folder / 'summary.json'}' lacks the key '{key}': run `layerprobe prune --curve` again.")
    missing = [c for c in ("strategy", "k", "removed") if curve is None or c not in curve.columns]
    if missing:
        raise RunError(f"'{folder / 'curve.csv'}' lacks the column '{missing[0]}': run `layerprobe prune --curve` "
                       "again.")
    rows = curve[curve["strategy"] == strategy]
    if rows.empty:
        raise ConfigError(f"--strategy {strategy}: the curve run has {', '.join(dict.fromkeys(curve['strategy']))}.")
    if k is None:
        chosen = summary["curve"].get(strategy)
        k = int(chosen.get("max_k") or 0) if isinstance(chosen, dict) else 0
        if k == 0:
            raise ConfigError(f"No k of the {strategy} curve stays within its tolerance: pass --k to {command} anyway.")
    row = rows[rows["k"] == k]
    if row.empty:
        raise ConfigError(f"--k {k}: the {strategy} curve has k = {int(rows['k'].min())}..{int(rows['k'].max())}.")
    removed = str(row["removed"].iloc[0])
    try:
        count = len(parse_ranges(removed, 4096, "removed", "3,7,9-11"))
    except ConfigError:
        count = None  # its syntax is named where it is applied (parse_remove), with the model's range
    if count is not None and count != k:
        raise RunError(f"'{folder / 'curve.csv'}': the {strategy} row at k = {k} has 'removed' {removed}, which is "
                       f"{count} block{'s' if count != 1 else ''}, not {k}: the curve was changed after it was written; "
                       "run `layerprobe prune --curve` again.")
    return recorded_model(folder, str(summary["model"])), removed, str(summary.get("part", "block"))


def recorded_model(folder: Path, spec: str) -> str:
    """The model a run folder names (summary.json's "model"), as the run resolved it: a relative path is joined to
    the working directory manifest.json recorded, and refused when it resolves nowhere; else it is used as written
    (a hub id, an embedded name, an absolute path)."""
    path = Path(spec).expanduser()
    if path.is_absolute():
        return spec
    try:
        cwd = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("cwd")
    except (OSError, ValueError, AttributeError):
        cwd = None
    if isinstance(cwd, str) and (Path(cwd) / path).exists():
        return str(Path(cwd) / path)
    if isinstance(cwd, str) and Path(cwd).resolve() != Path.cwd().resolve() and path.exists():
        raise RunError(f"'{folder / 'summary.json'}' names the model '{spec}', relative to '{cwd}', where it no longer "
                       "is: pass MODEL (the same weights) explicitly.")
    if spec.startswith((".", "~")) and not path.exists():
        raise RunError(f"'{folder / 'summary.json'}' names the model '{spec}', a path relative to another working "
                       "directory: pass MODEL (the same weights) explicitly, or run from that directory.")
    return spec


def recorded_weights(run_dir: str | Path) -> str | None:
    """The weights' fingerprint a run folder's summary.json records (None: not recorded)."""
    try:
        weights = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8")).get("weights")
    except (OSError, ValueError, AttributeError):
        return None
    return weights if isinstance(weights, str) else None


def check_weights(expected: str | None, loaded: Any, source: str, allow: bool) -> None:
    """A record made from other weights than the loaded model's is refused unless the user allows it
    (--allow-other-weights): its layer choice was measured on another model."""
    found = loaded.fingerprint()
    if allow or not expected or not found or expected == found:
        return
    raise RunError(f"{source} was made from other weights ({expected[:32]}...) than '{loaded.spec}' ({found[:32]}...): "
                   "pass the model it was made from, or --allow-other-weights to apply its layers anyway.")


def read_removal(path: Path) -> dict:
    """An export's layerprobe-removal.json, checked: a JSON object with the keys heal reads, each of its type;
    anything else is one line naming the file and the key."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"'{path}' cannot be read ({getattr(exc, 'strerror', None) or exc}): export again.") from None
    except ValueError as exc:
        raise RunError(f"'{path}' is not valid JSON ({first_line(exc)}): export again, or pass --remove.") from None
    if not isinstance(record, dict):
        raise RunError(f"'{path}' holds a {type(record).__name__}, not layerprobe's removal record (a JSON object): "
                       "export again.")
    for key in REQUIRED:
        if key not in record:
            raise RunError(f"'{path}' lacks the key '{key}' ({RECORD_TYPES[key][1]}): export again.")
    for key, (kinds, what) in RECORD_TYPES.items():  # a key may be null where the record has none, unless required
        value = record.get(key)
        if value is None and key not in REQUIRED:
            continue
        if not isinstance(value, kinds) or isinstance(value, bool) or (key == "removed" and not value) or (
                key in ITEM and not all(isinstance(i, ITEM[key]) and not isinstance(i, bool) for i in value)):
            raise RunError(f"'{path}': '{key}' is {json.dumps(value)[:40]}, not {what}: export again.")
    return record


REQUIRED = ("removed", "part", "source_model")  # the keys heal reads
RECORD_TYPES = {  # every key of layerprobe-removal.json (removal_record, lineage, heal's healing), by type (a later
    # version's key is not checked)
    "removed": (list, "a list of block ids"), "part": (str, "block, attn or mlp"),
    "source_model": (str, "the model's name or path"), "source_path": (str, "a path"),
    "kept": (list, "a list of block ids"), "num_layers_original": (int, "a whole number of blocks"),
    "num_layers_exported": (int, "a whole number of blocks"), "removed_label": (str, "the removed blocks' label"),
    "architecture": (str, "a model class name"), "layers_path": (str, "the blocks' module path"),
    "sublayer": (str, "attn or mlp"), "zeroed_parameters": (list, "a list of parameter names"),
    "from_curve": (str, "a curve run folder"), "strategy": (str, "a strategy's name"), "dtype": (str, "a dtype"),
    "device": (str, "a device"), "verified_max_difference": ((int, float), "a number"),
    "gain": (dict, "an object of measured gains"), "formats": (list, "a list of formats"),
    "files": (list, "a list of file names"), "healing": (dict, "heal's record (an object)"),
    "source_removal": (dict, "the source's removal (an object)"), "original": (dict, "the original's removal (an object)"),
}
ITEM = {"removed": int, "kept": int, "zeroed_parameters": str, "formats": str, "files": str}


def check_record_ids(record: dict, path: Path, num_layers: int) -> list[int]:
    """The record's removed block ids, each within the loaded model's `num_layers`, and agreeing with the record's
    own 'kept' and layer counts (a record edited by hand would re-prune the source otherwise than the export)."""
    ids = sorted(set(record["removed"]))
    outside = [i for i in ids if not 0 <= i < num_layers]
    if outside or len(ids) >= num_layers:
        raise RunError(f"'{path}': 'removed' names blocks {ids} and the model it is applied to has {num_layers} "
                       f"(0..{num_layers - 1}){'' if outside else ', keeping none'}: pass the model it was exported "
                       "from.")
    kept, original = record.get("kept"), record.get("num_layers_original")
    if kept is not None and (not isinstance(kept, list) or sorted(map(str, kept)) != sorted(
            str(i) for i in range(num_layers) if i not in ids)):
        raise RunError(f"'{path}': 'removed' {ids} and 'kept' {json.dumps(kept)[:60]} disagree (together they list "
                       f"each of the {num_layers} blocks once): export again.")
    if original is not None and original != num_layers:
        raise RunError(f"'{path}': 'num_layers_original' is {json.dumps(original)[:20]} and the model it is applied "
                       f"to has {num_layers} blocks: pass the model it was exported from, or export again.")
    exported = record.get("num_layers_exported")
    if exported is not None and record.get("part") == "block" and exported != num_layers - len(ids):
        raise RunError(f"'{path}': 'removed' {ids} leaves {num_layers - len(ids)} blocks, and "
                       f"'num_layers_exported' says {json.dumps(exported)[:20]}: export again.")
    return ids


def output(model: Any, batch: Any) -> Any:
    """Logits, or the last hidden state of a model without an LM head."""
    import torch

    with torch.inference_mode():
        out = model(**model_inputs(model, batch))
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def loader(folder: Path, head_class: str) -> Any:
    """The class that loads the export: transformers' own, or for a checkpoint with its own code the Auto class
    its config.json maps to that code (the code is saved beside the weights)."""
    import transformers

    if hasattr(transformers, head_class):
        return getattr(transformers, head_class)
    auto_map = json.loads((folder / "config.json").read_text()).get("auto_map") or {}
    for name, target in auto_map.items():
        if str(target).endswith("." + head_class) and hasattr(transformers, name):
            return getattr(transformers, name)
    raise ArchitectureError(f"The export's class {head_class} is neither in transformers nor in its config's "
                            "auto_map: it cannot be reloaded with plain transformers.")


def _loads_with(model: Any, head_class: str) -> str:
    """How the export loads, for the record: the class in transformers, or the Auto class its own code maps."""
    import transformers

    if hasattr(transformers, head_class):
        return f"transformers.{head_class}.from_pretrained(folder)"
    auto = next((name for name, target in (getattr(model.config, "auto_map", None) or {}).items()
                 if str(target).endswith("." + head_class)), "AutoModel")
    return f"transformers.{auto}.from_pretrained(folder, trust_remote_code=True)"


def remote(folder: Path) -> dict:
    """trust_remote_code for an export whose config maps custom code (the user trusted it to export it)."""
    return {"trust_remote_code": True} if json.loads((folder / "config.json").read_text()).get("auto_map") else {}


def verify_reload(folder: Path, want: Any, head_class: str, batch: Any, dtype: Any) -> float:
    """Reload the exported folder with plain transformers: the largest difference of its output to `want`, the
    output of the model pruned in place (blocks removed, or sub-layers removed by hooks)."""
    reloaded = loader(folder, head_class).from_pretrained(folder, dtype=dtype, **remote(folder)).eval().to(batch.device)
    return float((want.float() - output(reloaded, batch).float()).abs().max())


def removal_record(loaded: Any, stack: Any, ids: list[int], part: str, zeroed: list[str], from_curve: str | None,
                   strategy: str, difference: float | None, gain: dict | None) -> dict:
    """layerprobe-removal.json: what was removed from what, the convention, the verification and the gain."""
    keep = [i for i in range(len(stack)) if i not in ids]
    head_class = type(loaded.model).__name__
    return {
        "source_model": loaded.spec, "source_path": str(loaded.path.resolve()) if loaded.path else None,
        "revision": loaded.revision, "weights": loaded.fingerprint(), "gguf": loaded.gguf,
        "architecture": head_class, "layers_path": stack.path, "part": part,
        "sublayer": stack.sublayer if part != "block" else None, "num_layers_original": len(stack),
        "num_layers_exported": len(keep) if part == "block" else len(stack),
        "removed": ids, "removed_label": ranges_label(ids), "kept": keep, "convention": CONVENTION,
        "zeroed_parameters": zeroed, "from_curve": from_curve, "strategy": strategy if from_curve else None,
        "dtype": loaded.dtype, "device": loaded.device, "verified_max_difference": difference, "gain": gain,
        "loads_with": _loads_with(loaded.model, head_class),
    }
