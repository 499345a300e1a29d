"""layerprobe: which layers of a transformer actually work."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("layerprobe")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
