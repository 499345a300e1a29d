"""layerprobe: which layers of a transformer actually work."""

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

__all__ = ["__version__"]
