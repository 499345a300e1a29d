"""Accelerate device maps: parse --device-map, fit module names to the class being loaded, find the input device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerprobe.errors import ModelLoadError
from layerprobe.models.heads import auto_class

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def parse_device_map(spec: str) -> str | dict:
    """auto / balanced / balanced_low_0 / sequential, or a JSON object {module name: device} inline or in a file."""
    if spec in DEVICE_MAPS:
        return spec
    path = Path(spec).expanduser()
    if spec.endswith(".json") and not path.is_file():
        raise ModelLoadError(f"--device-map file '{spec}' does not exist: pass an existing JSON file or 'auto'.")
    try:
        mapping = json.loads(path.read_text() if path.is_file() else spec)
    except (json.JSONDecodeError, OSError):
        mapping = None
    if not isinstance(mapping, dict) or not mapping:
        raise ModelLoadError(f"--device-map '{spec}' is not {', '.join(DEVICE_MAPS)} or a JSON object of module "
                             "name -> device, e.g. '{\"model.embed_tokens\": 0, \"model.layers\": 1}'.")
    return mapping


def placement_kwargs(device_map: str, offload: str) -> dict:
    """from_pretrained keywords for an accelerate device map; --offload says where weights may spill."""
    import torch

    mapping = parse_device_map(device_map)
    kwargs: dict[str, Any] = {"device_map": mapping}
    if offload.startswith("disk:") and len(offload) > 5:
        kwargs["offload_folder"] = offload[5:]
    elif offload not in ("none", "cpu"):
        raise ModelLoadError(f"Unknown --offload '{offload}': use none (GPUs only), cpu, or disk:FOLDER.")
    if offload == "none" and isinstance(mapping, str) and torch.cuda.is_available():
        # GPUs only: whatever does not fit must be an error, not a silent spill to RAM
        kwargs["max_memory"] = {i: torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())}
    return kwargs


def fit_device_map(mapping: dict, config: Any, head: str, trust_remote_code: bool = False) -> dict:
    """Module names as the loaded class spells them: 'model.layers.0' and 'layers.0' both work for the base model and
    the LM head alike (a head's own modules are dropped for the base model); unknown names are an error."""
    import torch

    with torch.device("meta"):  # names only: no memory, even for a 70B model
        skeleton = auto_class(head).from_config(config, trust_remote_code=trust_remote_code)
    names = {name for name, _ in skeleton.named_modules()}
    prefix = getattr(skeleton, "base_model_prefix", "")
    fitted = {}
    for key, where in mapping.items():
        if key in names:
            fitted[key] = where
        elif prefix and key.startswith(prefix + ".") and key[len(prefix) + 1 :] in names:
            fitted[key[len(prefix) + 1 :]] = where
        elif prefix and f"{prefix}.{key}" in names:
            fitted[f"{prefix}.{key}"] = where
        elif head == "base" and prefix and not key.startswith(prefix + "."):
            continue  # e.g. lm_head in a map written for the causal LM
        else:
            example = next((n for n in sorted(names) if n.count(".") == 2 and n[-1].isdigit()), sorted(names)[1])
            raise ModelLoadError(f"--device-map names '{key}', which is not a module of this model: use names like "
                                 f"'{example}'.")
    return fitted


def input_device(model: Any) -> str:
    """Where input ids go: the device of the input embeddings (also under an accelerate device map)."""
    placed = getattr(model, "hf_device_map", None)
    embeddings = model.get_input_embeddings()
    if placed:
        name = next(n for n, m in model.named_modules() if m is embeddings)
        owners = [k for k in placed if k == "" or name == k or name.startswith(k + ".")]
        where = placed[max(owners, key=len)] if owners else next(iter(placed.values()))
        if isinstance(where, int):
            return f"cuda:{where}"
        return "cpu" if where in ("disk", "meta") else str(where)
    return str(embeddings.weight.device)


def reset_peak_memory(device: str) -> None:
    """Start counting peak GPU memory from here (no-op off CUDA)."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: str) -> float | None:
    """Peak GPU memory torch allocated since reset_peak_memory (all visible GPUs), in GiB; None off CUDA."""
    import torch

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return None
    return round(sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())) / 2**30, 3)
