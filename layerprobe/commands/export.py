"""run_export(config): the model without some layers, saved as a checkpoint that plain transformers loads.

Block ids are 0-based and `--remove 20-27` removes 20 through 27 inclusive. The kept blocks are renumbered
0..L-k-1 in the weights and in every per-layer config field (models/surgery.py), the tokenizer and generation
config are copied, and beside them lie layerprobe-removal.json (what was removed from what) and mergekit.yaml
(a passthrough merge that builds the same model; mergekit's layer_range is half-open).
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from layerprobe.config import ExportConfig
from layerprobe.data.packing import max_sequence_length
from layerprobe.errors import ArchitectureError, ConfigError, NumericsError, RunError, first_line, numerics_fix
from layerprobe.evaluation.variants import PARTS, ranges_label
from layerprobe.models.layers import find_blocks, find_sublayer, is_encoder, layer_kinds, text_config
from layerprobe.models.load import load_model, locate
from layerprobe.models.gain import measure_gain
from layerprobe.models.surgery import check_indices, removal_target, removed
from layerprobe.lineage import build_on, check_curve_numbering, lineage, removal_of
from layerprobe.progress import Progress, notice, silent
from layerprobe.removal import (CONVENTION, REMOVAL_FILE, check_weights, from_curve, output, parse_remove,
                                recorded_weights, removal_record, verify_reload)
from layerprobe.files import publishing
from layerprobe.runs.folder import (abandons_on_error, atomic_write_text, check_out_apart, claimed, enclosing_run,
                                    run_files)
from layerprobe.settings import takes
from layerprobe.commands.export_gguf import (GGUF_NAME, check_converted_file, check_gguf_request, guard_gguf_file,
                                            write_converted, write_gguf)

NOTHING = "none"  # --remove none: every block kept, the checkpoint written as it is (a heal merged/ to GGUF)
# the Linear that produces a sub-layer's output, by name: zeroing it (and its bias) zeroes the sub-layer's output
OUTPUT_PROJECTIONS = {"attn": ("o_proj", "c_proj", "out_proj", "dense", "wo"),
                      "mlp": ("down_proj", "c_proj", "dense_4h_to_h", "fc2", "wo", "w2")}


def mergekit_yaml(source: str, keep: list[int], dtype: str, note: str | None = None) -> str:
    """A passthrough merge whose slices are the runs of kept layers, as half-open layer ranges."""
    runs: list[list[int]] = []
    for index in keep:
        if runs and index == runs[-1][1]:
            runs[-1][1] = index + 1
        else:
            runs.append([index, index + 1])
    lines = [f"# {CONVENTION}", *([f"# {note}"] if note else []), "slices:"]
    for low, high in runs:
        lines += ["  - sources:", f"      - model: {json.dumps(source)}",
                  f"        layer_range: [{low}, {high}]  # layers {low}..{high - 1}"]
    return "\n".join([*lines, "merge_method: passthrough", f"dtype: {dtype}", ""])


def _projection(sublayer: Any, part: str, how: str) -> Any:
    """The linear layer whose zeroing removes the sub-layer as `how` defines it in plain transformers, or None."""
    import torch

    module, residual_arg = removal_target(sublayer, how)
    if residual_arg is not None:  # the module's own norm is skipped: no weights give that
        return None
    if isinstance(module, torch.nn.Linear):
        return module
    return next((getattr(module, n) for n in OUTPUT_PROJECTIONS[part]
                 if isinstance(getattr(module, n, None), torch.nn.Module)), None)


def zero_sublayers(model: Any, stack: Any, ids: list[int], part: str) -> list[str]:
    """Zero the output projection of each chosen block's attention or MLP: in plain transformers, the sub-layer
    then adds nothing to the residual stream (Post-LN: LayerNorm(x + 0), --sublayer branch). Returns the zeroed
    parameter names."""
    import torch

    names = {id(p): n for n, p in model.named_parameters()}
    zeroed = []
    for index in ids:
        projection = _projection(find_sublayer(model, stack.blocks[index], part), part, stack.sublayer)
        if projection is None:
            block = type(stack.blocks[index]).__name__
            raise ArchitectureError(
                f"--part {part} export: {block} has no output projection ({', '.join(OUTPUT_PROJECTIONS[part])}) "
                "whose zeroing removes the sub-layer in plain transformers"
                + (" with its norm skipped: export --sublayer branch" if stack.sublayer == "module" else "")
                + " or whole blocks (--part block).")
        with torch.no_grad():
            for parameter in projection.parameters(recurse=False):
                parameter.zero_()
                zeroed.append(names[id(parameter)])
    return zeroed


def _check_kinds_written(model: Any, short: Any, kept: list[str], ids: list[int]) -> None:
    """The shortened config must say what kind each kept layer is: a hybrid whose config derives the kinds from
    periods (Jamba's attn_layer_period) cannot, for most removals; refused before anything is written."""
    written = layer_kinds(model, short)
    if written != kept:
        config = text_config(model)
        periods = sorted(k for k in vars(config) if k.endswith(("_period", "_offset")))
        raise ArchitectureError(
            f"--remove {ranges_label(ids)}: {type(config).__name__} derives each layer's kind from "
            f"{', '.join(periods) or 'its settings'}, and the kept layers ({', '.join(kept)}) cannot be written in it "
            f"(it would read {', '.join(written)}): remove whole periods, or keep the model and prune in place.")


def _head(spec: str, config: ExportConfig) -> str:
    """The head the checkpoint has (its config's architectures), so the export keeps it."""
    from layerprobe.models.load import checkpoint_architecture

    name = checkpoint_architecture(spec, config.model.revision, config.model.trust_remote_code, config.model.gguf_file)
    for suffix, head in (("ForCausalLM", "causal-lm"), ("ForConditionalGeneration", "causal-lm")):
        if name and name.endswith(suffix):
            return head
    return "as-saved"  # any other class (GPT2LMHeadModel, BertForSequenceClassification, ...) as it was saved


@takes(ExportConfig, "layerprobe.export")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_export(config: ExportConfig, progress: Progress = silent) -> dict:
    """Load, remove, save into a temporary sibling, verify the reload, then rename into --out: a folder at --out is
    always a whole export."""
    spec, remove, part = config.model.model, config.remove, config.part
    if config.from_curve and (config.remove or config.part != "block"):
        raise ConfigError("--from-curve chooses the layers and the part: drop --remove and --part, or drop "
                          "--from-curve.")
    if config.from_curve:
        check_out_apart(config.out, {"the --from-curve run": config.from_curve})  # as every command (rule 2)
        curve_model, remove, part = from_curve(config.from_curve, config.strategy, config.k)
        spec = spec or curve_model
    if not remove:
        raise ConfigError("Nothing to remove: pass --remove 20-27 (0-based, inclusive), --from-curve RUN, or "
                          "--remove none to write the checkpoint as it is.")
    if isinstance(remove, str) and remove.strip().lower() == NOTHING and part != "block":
        raise ConfigError(f"--remove none zeroes no sub-layer: drop --part {part}.")
    if part not in PARTS:
        raise ConfigError(f"Unknown --part '{part}': use {', '.join(PARTS)}.")
    derived = removal_of(spec)  # MODEL is an export or a healed merged/: said, and built on (lineage.py)
    if derived is not None and config.from_curve:
        check_curve_numbering(config.from_curve, spec, derived, recorded_weights(config.from_curve))
    kind, source = locate(spec, config.model.gguf_file)
    check_gguf_request(config.formats, config.out, part, kind, source, config.overwrite, config.gguf_type)
    single = "gguf" in config.formats and config.out.lower().endswith(".gguf")  # --out is the .gguf file itself
    if single:
        out = guard_gguf_file(config.out, config.overwrite)
        check_apart(out, config.out, source)
    else:
        out = guard_out(config.out, source, config.overwrite)
    with contextlib.ExitStack() as held:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            held.enter_context(claimed(out.with_name(f".{out.name}.layerprobe.lock"), f"--out '{config.out}'"))
        except OSError as exc:  # /proc/x, /dev/null/x, a read-only folder
            raise RunError(f"--out '{config.out}' cannot be created or written ({exc.strerror or first_line(exc)}): "
                           "pass a writable folder.") from None
        # another export may have finished there meanwhile
        guard_gguf_file(config.out, config.overwrite) if single else guard_out(config.out, None, config.overwrite)
        return _export(config, spec, remove, part, out, progress, derived)


def guard_out(out_arg: str, source: Path | None, overwrite: bool) -> Path:
    """--out, resolved, checked before anything is loaded or written: never a symbolic link, the working directory
    or a parent of it, the source model or a folder holding it; an existing non-empty folder only with --overwrite,
    and only when an earlier export wrote it (its layerprobe-removal.json)."""
    given = Path(out_arg).expanduser()
    if given.is_symlink():
        raise RunError(f"--out '{out_arg}' is a symbolic link (to '{given.resolve()}'): pass the real folder.")
    out, cwd = given.resolve(), Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        raise RunError(f"--out '{out_arg}' is the working directory or holds it: pass a new folder for the export.")
    check_apart(out, out_arg, source)
    if out.exists() and not out.is_dir():
        raise RunError(f"--out '{out_arg}' is a file: pass a folder path.")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise RunError(f"--out '{out_arg}' exists and is not empty: pass another folder, or --overwrite to "
                           "replace an earlier export.")
        _check_earlier_export(out, out_arg)
    return out


def check_apart(out: Path, out_arg: str, source: Path | None) -> None:
    """An export (a folder, or the .gguf file alone) is never the source model, inside it or holding it, and never
    inside a layerprobe run folder (an unlisted file there would make that run foreign to its own --overwrite)."""
    if source is not None:
        held = source.resolve()
        if out == held or out in held.parents or held in out.parents:
            raise RunError(f"--out '{out_arg}' is the source model ('{held}'), inside it or holds it: a command "
                           "never writes where it reads; pass a new folder.")
    run = enclosing_run(out)
    if run is not None:
        raise RunError(f"--out '{out_arg}' is inside the layerprobe run folder '{run}' (its merged/ or another part "
                       "its summary describes): pass a path outside it; an export never replaces part of a run.")


def _check_earlier_export(out: Path, out_arg: str) -> None:
    """--overwrite replaces an earlier export only: its record is there, and it names every file in --out."""
    try:
        record = json.loads((out / REMOVAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict):
        raise RunError(f"--out '{out_arg}' holds files layerprobe did not write (no readable {REMOVAL_FILE}): "
                       "--overwrite only replaces an earlier export; pass another folder.")
    listed = record.get("files")
    present = run_files(out)
    foreign = [name for name in present if isinstance(listed, list) and name not in listed]
    if foreign:
        raise RunError(f"--out '{out_arg}' holds '{foreign[0]}', which layerprobe did not write: move it away or "
                       "pass another folder; --overwrite only replaces the files of an earlier export.")


def _check_difference(difference: float | None, tolerance: float, loaded: Any, head_class: str) -> None:
    """The reload matches the pruned model within `tolerance`; a NaN or infinite difference is the checkpoint's
    outputs (their activations overflow), not the export."""
    if difference is None:
        return
    if not math.isfinite(difference):
        raise NumericsError(f"'{loaded.spec}' gives NaN or infinite outputs at {loaded.dtype}, so the export "
                            f"cannot be verified: {numerics_fix(loaded.dtype)}; not exported.")
    if not difference <= tolerance:
        raise RunError(f"The exported folder reloaded with plain transformers differs from the pruned model by "
                       f"{difference:.3g} (tolerance {tolerance:g}): not exported; please report this "
                       f"architecture ({head_class}).")


def _export(config: ExportConfig, spec: str, remove: Any, part: str, out: Path, progress: Progress,
            derived: dict | None) -> dict:
    """The export into a claimed --out: load, remove, save into a private sibling, verify, publish by rename."""
    import torch

    progress("export", 0, 4)
    loaded = load_model(spec, head=_head(spec, config), dtype=config.model.dtype, device=config.model.device,
                        revision=config.model.revision, trust_remote_code=config.model.trust_remote_code,
                        gguf_file=config.model.gguf_file, cache=config.model.cache)
    if config.from_curve:
        check_weights(recorded_weights(config.from_curve), loaded, f"--from-curve '{config.from_curve}'",
                      config.allow_other_weights)
    model, stack = loaded.model, find_blocks(loaded.model, config.model.layers_path, config.model.stack)
    stack.sublayer = config.sublayer
    ids = ([] if isinstance(remove, str) and remove.strip().lower() == NOTHING else
           parse_remove(remove, len(stack), config.from_curve, config.strategy) if isinstance(remove, str) else
           check_indices(remove, len(stack)))
    if derived is not None:
        notice(build_on(spec, derived, len(stack)))
    generator = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().num_embeddings
    longest = max_sequence_length(model, loaded.tokenizer)  # a model shorter than the timing batch: capped
    length = min(config.timing_seq_len, longest) if longest else config.timing_seq_len
    batch = torch.randint(0, vocab, (config.timing_batch, length), generator=generator)
    batch = batch.to(loaded.device)
    progress("export", 1, 4)
    gain = measure_gain(model, stack, ids, batch, config.timing_repeats, part, config.timing_new_tokens, longest)
    try:
        with publishing(out, folder=out.suffix.lower() != ".gguf" or "hf" in config.formats) as partial:
            # --out is a whole export or what it was before
            removal = _write_export(config, loaded, stack, ids, part, batch, gain, partial, progress, derived)
            progress("export", 3, 4)
    except BaseException as exc:
        # save_pretrained on a full or read-only disk: an OSError, or safetensors' own error for the weights
        if isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError":
            reason = getattr(exc, "strerror", None) or str(exc).split(": ", 1)[-1]
            raise RunError(f"Cannot write the export beside '{out}' ({reason}): free space on that disk or pass "
                           "another --out; nothing was exported.") from None
        raise
    progress("export", 4, 4)
    return removal | {"out": str(out), "encoder": is_encoder(model)}


def _write_export(config: ExportConfig, loaded: Any, stack: Any, ids: list[int], part: str, batch: Any, gain: dict,
                  partial: Path, progress: Progress, derived: dict | None) -> dict:
    """The shortened checkpoint, its tokenizer, mergekit.yaml and layerprobe-removal.json written into `partial`,
    after its reload with plain transformers matched the model pruned in place. The removal record."""
    model, head_class = loaded.model, type(loaded.model).__name__
    keep = [i for i in range(len(stack)) if i not in ids]
    zeroed: list[str] = []
    kinds = layer_kinds(model, stack)
    hf = "hf" in config.formats
    mark = {"source_model": loaded.spec, "weights": loaded.fingerprint(), "num_layers_original": len(stack),
            "removed": ids, "kept": keep, "convention": CONVENTION}  # the GGUF's layerprobe.removal key
    target = partial if partial.is_file() else partial / GGUF_NAME  # a file: --out is the .gguf itself
    name = Path(config.out).name if target == partial else GGUF_NAME
    converted = None
    with removed(model, ids, part, stack) as short:
        want = output(model, batch)  # the pruned model as every layerprobe measurement ran it
        if part == "block":
            _check_kinds_written(model, short, [kinds[i] for i in keep], ids)
            if hf:
                with loaded.as_saved():  # the config as the checkpoint had it, but the removal's fields
                    model.save_pretrained(partial)
            if "gguf" in config.formats and not loaded.gguf:  # a transformers source: converted while shortened
                converted = write_converted(loaded, model, [kinds[i] for i in keep], target, config.gguf_type, mark,
                                            name)
    if part != "block":
        zeroed = zero_sublayers(model, stack, ids, part)  # the loaded copy is changed for good: it is ours
        with loaded.as_saved():
            model.save_pretrained(partial)
    progress("export", 2, 4)
    tolerance = config.tolerance if config.tolerance is not None else (1e-4 if loaded.dtype == "float32" else 2e-2)
    difference = None
    if hf:
        dtype = next(model.parameters()).dtype
        difference = verify_reload(partial, want, head_class, batch, dtype) if config.verify else None
        _check_difference(difference, tolerance, loaded, head_class)
        if loaded.tokenizer is not None:
            loaded.tokenizer.save_pretrained(partial)
    removal = removal_record(loaded, stack, ids, part, zeroed, config.from_curve, config.strategy, difference, gain)
    removal["formats"] = list(config.formats)
    if derived is not None:
        removal |= lineage(derived, ids, part)
    if converted is not None:
        removal["gguf_export"] = check_converted_file(loaded, converted, keep, len(stack), target, want, batch,
                                                      config.gguf_type, config.tolerance, tolerance, config.verify,
                                                      name)
    elif "gguf" in config.formats:
        removal["gguf_export"] = write_gguf(loaded, keep, target, want, batch, tolerance, mark, config.verify, name)
    if "gguf" in config.formats and target == partial:  # the .gguf file alone: its layerprobe.removal key is the record
        return removal
    if part == "block" and hf:
        # mergekit reads safetensors checkpoints: a local folder's path (a GGUF's dequantized cache), or the hub id
        source = str(loaded.path.resolve()) if loaded.path and loaded.path.is_dir() else loaded.spec
        note = (f"source: the dequantized cache of {loaded.spec} (mergekit cannot read GGUF files)"
                if loaded.gguf and source != loaded.spec else None)
        atomic_write_text(partial / "mergekit.yaml", mergekit_yaml(source, keep, loaded.dtype, note))
    removal["files"] = sorted({*run_files(partial), REMOVAL_FILE})  # what a later --overwrite may replace
    atomic_write_text(partial / REMOVAL_FILE, json.dumps(removal, indent=2) + "\n")
    return removal
