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
from typing import Callable
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("layerprobe")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

if "transformers" in _sys.modules:
    # transformers is already paid for: make saved in-house models loadable with the Auto classes right away.
    # (Otherwise layerprobe.models.inhouse registers them when imported; load_model always does.)
    import layerprobe.models.inhouse  # noqa: F401

# public name -> "module:attribute" (or the object): what every command shares; each command's own names (its
# function, its settings class) come from its record in layerprobe.commands.COMMANDS
_SHARED = {
    "load_run": "layerprobe.runs.read:load_run",
    "Run": "layerprobe.runs.read:Run",
    "RunResult": "layerprobe.runs.write:RunResult",
    "LayerprobeError": "layerprobe.errors:LayerprobeError",
    "resolve": "layerprobe.settings:resolve",
    "validate": "layerprobe.settings:validate",
    "ModelOptions": "layerprobe.config:ModelOptions",
    "DataOptions": "layerprobe.config:DataOptions",
}


def _api() -> dict:
    """Every public name: the commands' (read from COMMANDS when asked, so a command registered later is there
    too), then the shared ones."""
    from layerprobe.commands import COMMANDS

    found: dict = {}
    for command in COMMANDS.values():
        found |= command.public()
    return found | _SHARED


def lazy_exports(package: str, api: dict | Callable[[], dict], namespace: dict):
    """(__getattr__, __dir__) of a package whose names in `api` ('module:attribute', or the object itself) are
    imported on first use; `api` may be a function returning the table."""

    def table() -> dict:
        return api() if callable(api) else api

    def __getattr__(name: str):
        found = table()
        if name in found:
            value = found[name]
            if isinstance(value, str):
                module, attribute = value.split(":")
                value = getattr(_importlib.import_module(module), attribute)
            namespace[name] = value
            return value
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__():
        return sorted([*namespace, *table()])

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_exports("layerprobe", _api, globals())


_API = _api()  # every public name at import ('module:attribute' or the object); a command registered later is
# found too: __getattr__ reads COMMANDS when asked
__all__ = ["__version__", *_API]
