"""layerprobe: which layers of a transformer actually work.

The library is what the CLI runs: each command is one function taking its settings dataclass, returning a
RunResult (the run folder, its tables as DataFrames, the summary), and raising LayerprobeError with a one-line
message on bad input. Names are imported on first use, so `import layerprobe` stays light.

    from layerprobe import AngularConfig, DataOptions, ModelOptions, angular
    run = angular(AngularConfig(model=ModelOptions("minilm"), data=DataOptions("builtin", tokens=16384)))
    run.layers  # layers.csv as a DataFrame
"""

import importlib as _importlib
import sys as _sys
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("layerprobe")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

if "transformers" in _sys.modules:
    # transformers is already paid for: make saved in-house models loadable with the Auto classes right away.
    # (Otherwise layerprobe.models.inhouse registers them when imported; load_model always does.)
    import layerprobe.models.inhouse  # noqa: F401

# public name -> "module:attribute": the commands, their settings, the run records and the error type
_API = {
    "angular": "layerprobe.commands.angular:run_angular",
    "prune": "layerprobe.commands.prune.run:run_prune",
    "curve": "layerprobe.commands.prune.curve:run_curve",
    "gradnorm": "layerprobe.commands.gradnorm.run:run_gradnorm",
    "export": "layerprobe.commands.export:run_export",
    "heal": "layerprobe.commands.heal.run:run_heal",
    "toy": "layerprobe.commands.toy:run_toy",
    "merge": "layerprobe.commands.prune.merge:merge_shards",
    "compare": "layerprobe.runs.compare:compare_folders",
    "load_run": "layerprobe.runs.read:load_run",
    "Run": "layerprobe.runs.read:Run",
    "RunResult": "layerprobe.runs.write:RunResult",
    "LayerprobeError": "layerprobe.errors:LayerprobeError",
    "resolve": "layerprobe.settings:resolve",
    "validate": "layerprobe.settings:validate",
    "LayerMonitor": "layerprobe.integrations.monitor:LayerMonitor",  # during training: a plain loop
    "LayerprobeCallback": "layerprobe.integrations.hf_trainer:LayerprobeCallback",  # during training: HF Trainer
    **{name: f"layerprobe.config:{name}" for name in (
        "AngularConfig", "PruneConfig", "CurveSettings", "GradnormConfig", "TrainSettings", "ExportConfig",
        "HealConfig", "ToyConfig", "ModelOptions", "DataOptions", "MonitorSettings")},
}


def lazy_exports(package: str, api: dict[str, str], namespace: dict):
    """(__getattr__, __dir__) of a package whose names in `api` ('module:attribute') are imported on first use."""

    def __getattr__(name: str):
        if name in api:
            module, attribute = api[name].split(":")
            value = getattr(_importlib.import_module(module), attribute)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__():
        return sorted([*namespace, *api])

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_exports("layerprobe", _API, globals())


__all__ = ["__version__", *_API]
