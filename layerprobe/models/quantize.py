"""Quantized weights: bitsandbytes 4/8-bit on load (--quantize), and checkpoints saved quantized (bitsandbytes,
GPTQ, AWQ) through transformers' own quantization configs. Every missing piece is one line naming it."""

from __future__ import annotations

import importlib.util
from typing import Any

from layerprobe.errors import ModelLoadError
from layerprobe.config import QUANTIZE  # declared once, with the settings that take it

# quant_method of a saved quantization_config -> the packages transformers needs to load it
SAVED_METHOD_PACKAGES = {
    "bitsandbytes": ("bitsandbytes",),
    "gptq": ("optimum", "gptqmodel"),
    "awq": ("gptqmodel",),
}


def _missing(packages: tuple[str, ...]) -> list[str]:
    return [name for name in packages if importlib.util.find_spec(name) is None]


def saved_quantization(config: Any) -> dict | None:
    """What a checkpoint saved quantized says about itself: {'method', 'bits'}, None for plain weights."""
    saved = getattr(config, "quantization_config", None)
    if saved is None:
        return None
    saved = saved if isinstance(saved, dict) else saved.to_dict()
    method = str(saved.get("quant_method", "unknown")).lower()
    bits = saved.get("bits") or (4 if saved.get("load_in_4bit") else 8 if saved.get("load_in_8bit") else None)
    return {"method": method, "bits": bits, "on_load": False}


def quantization_settings(spec: str, quantize: str | None, config: Any, device: str, dtype: str,
                          source: str) -> tuple[Any, dict | None]:
    """(the quantization_config to load with, None for plain or saved-quantized weights; the manifest's
    quantization record, None for plain weights). Refuses, in one line each: an unknown --quantize, --quantize on
    a CPU, on a GGUF or on a checkpoint already quantized, and a missing package."""
    saved = saved_quantization(config)
    if quantize is None:
        if saved is None:
            return None, None
        missing = _missing(SAVED_METHOD_PACKAGES.get(saved["method"], ()))
        if missing:
            raise ModelLoadError(f"'{spec}' is saved quantized ({saved['method']}, {saved['bits'] or '?'}-bit) and "
                                 f"loading it needs {' and '.join(missing)}: pip install {' '.join(missing)}.")
        return None, saved
    if quantize not in QUANTIZE:
        raise ModelLoadError(f"Unknown --quantize '{quantize}': use 4bit or 8bit.")
    if source == "gguf":
        raise ModelLoadError("--quantize does not apply to a GGUF file (its weights are dequantized to --dtype): "
                             "drop --quantize, or load the checkpoint's safetensors release.")
    if saved is not None:
        raise ModelLoadError(f"'{spec}' is already quantized ({saved['method']}): drop --quantize.")
    if not device.startswith("cuda"):
        raise ModelLoadError(f"--quantize {quantize} needs a CUDA GPU (bitsandbytes kernels) and the device is "
                             f"{device}: run on a GPU, or drop --quantize.")
    missing = _missing(("bitsandbytes",))
    if missing:
        raise ModelLoadError(f"--quantize {quantize} needs the bitsandbytes package: pip install bitsandbytes.")
    import torch
    import transformers

    bits = int(quantize[0])
    settings = transformers.BitsAndBytesConfig(
        load_in_4bit=bits == 4, load_in_8bit=bits == 8, bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=getattr(torch, dtype))
    return settings, {"method": "bitsandbytes", "bits": bits, "on_load": True}
