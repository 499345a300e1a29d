"""layerprobe inside training: LayerMonitor for a plain PyTorch loop, LayerprobeCallback for the Hugging Face
Trainer. Importable without the CLI (no typer or rich); names are imported on first use, so importing this package
loads neither torch nor transformers."""

import importlib as _importlib

_API = {
    "LayerMonitor": "layerprobe.integrations.monitor:LayerMonitor",
    "MonitorSettings": "layerprobe.config:MonitorSettings",
    "LayerprobeCallback": "layerprobe.integrations.hf_trainer:LayerprobeCallback",
}


def __getattr__(name: str):
    if name in _API:
        module, attribute = _API[name].split(":")
        value = getattr(_importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'layerprobe.integrations' has no attribute '{name}'")


def __dir__():
    return sorted([*globals(), *_API])


__all__ = list(_API)
