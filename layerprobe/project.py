"""Project defaults from `[tool.layerprobe]` in pyproject.toml or a layerprobe.toml; CLI flags win."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

from layerprobe.errors import ConfigError

KEYS = {
    "model": str, "dataset": str, "text_field": str, "tokens": int, "seq_len": int, "batch_size": int,
    "task": str, "tasks": list, "out": str, "include_path": str, "num_fewshot": int, "limit": (int, float),
    "block": int, "layers": str, "dtype": str, "device": str, "tolerance": dict,
}


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"'{path}' is not valid TOML ({exc}): fix the file.") from None


def find_project_config(start: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The nearest layerprobe.toml or pyproject.toml [tool.layerprobe], searching upward from start."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        own = candidate / "layerprobe.toml"
        if own.is_file():
            data = _read(own)
            return _check(data.get("tool", {}).get("layerprobe", data), own), own
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            section = _read(pyproject).get("tool", {}).get("layerprobe")
            return (_check(section, pyproject), pyproject) if section else ({}, None)
    return {}, None


def _check(data: dict, path: Path) -> dict:
    for key, value in data.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" Did you mean: {close[0]}?" if close else f" Known keys: {', '.join(KEYS)}."
            raise ConfigError(f"Unknown key '{key}' in {path}.{hint}")
        if not isinstance(value, KEYS[key]) or isinstance(value, bool):
            raise ConfigError(f"'{key}' in {path} has the wrong type ({type(value).__name__}): fix the value.")
    if "tasks" in data and "task" not in data and data["tasks"]:
        data = {**data, "task": data["tasks"][0]}
    return data


def pick(cli_value: Any, project: dict, key: str, default: Any) -> Any:
    """CLI value if given, else the project config's, else the built-in default."""
    if cli_value is not None:
        return cli_value
    return project.get(key, default)
