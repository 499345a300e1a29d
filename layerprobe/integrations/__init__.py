"""layerprobe inside training: LayerMonitor for a plain PyTorch loop, LayerprobeCallback for the Hugging Face
Trainer, LayerprobeLightningCallback for Lightning (if installed). Importable without the CLI (no typer or rich);
names are imported on first use, so importing this package loads neither torch nor transformers."""

from layerprobe import lazy_exports

_API = {
    "LayerMonitor": "layerprobe.integrations.monitor:LayerMonitor",
    "MonitorSettings": "layerprobe.config:MonitorSettings",
    "LayerprobeCallback": "layerprobe.integrations.hf_trainer:LayerprobeCallback",
    "LayerprobeLightningCallback": "layerprobe.integrations.lightning:LayerprobeLightningCallback",
}


__getattr__, __dir__ = lazy_exports("layerprobe.integrations", _API, globals())

__all__ = list(_API)
