"""manifest.json: enough to tell exactly what produced a run folder."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """Commit of the layerprobe source tree when it is a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def start_time() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def build_manifest(command: str, config: dict[str, Any], started: str, seconds: float, **facts: Any) -> dict[str, Any]:
    """Versions, command line, resolved config and run facts."""
    return {
        "command": command,
        "layerprobe_version": _version("layerprobe"),
        "git_commit": git_commit(),
        "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv else [],  # the program, not its path
        "cwd": os.getcwd(),  # where relative paths in the config and the argv were read (export.recorded_model)
        "started": started,
        "wall_seconds": round(seconds, 3),
        "versions": {
            "python": platform.python_version(),
            **{name: _version(name) for name in ("torch", "transformers", "datasets", "lm_eval", "numpy")},
        },
        "platform": platform.platform(),
        "config": config,
        **facts,
    }
