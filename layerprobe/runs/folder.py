"""Run folders under reports/: never silently overwritten, every file written atomically."""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError


def slug(text: str) -> str:
    """A folder-safe name for a model spec: 'meta-llama/Llama-2-7b-hf' -> 'meta-llama--Llama-2-7b-hf'."""
    name = text.rstrip("/\\")
    if os.sep in name or name.startswith((".", "~")):
        name = Path(name).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-") or "model"


def prepare_run_dir(out: str | Path, overwrite: bool = False, resume: bool = False) -> Path:
    """Create the run folder; a non-empty existing one gets a timestamped sibling unless overwrite/resume.
    resume: the folder must exist already."""
    path = Path(out)
    if resume and not path.is_dir():
        raise RunError(f"--resume: run folder '{out}' does not exist: run without --resume first (same --out).")
    if path.exists() and not path.is_dir():
        raise RunError(f"--out '{out}' is a file: pass a folder path.")
    if path.is_dir() and any(path.iterdir()) and not (overwrite or resume):
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        path = path.with_name(f"{path.name}-{stamp}")
        n = 1
        while path.exists():
            path = path.with_name(f"{Path(out).name}-{stamp}-{n}")
            n += 1
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and rename: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: Path, frame: Any) -> None:
    """A pandas DataFrame as CSV, floats exact (shortest round-trip form), atomically."""
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)  # floats as repr: they read back bit for bit (resume, merge)
    atomic_write_text(path, buffer.getvalue())


def save_figure(path: Path, figure: Any, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Save a matplotlib figure as path.<fmt> for each format, atomically; returns the files."""
    written = []
    for fmt in formats:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, dpi=200, bbox_inches="tight")
        target = path.with_suffix(f".{fmt}")
        atomic_write_bytes(target, buffer.getvalue())
        written.append(target)
    return written


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"'{path}' is missing: is '{path.parent}' a finished layerprobe run folder?") from None
    except json.JSONDecodeError as exc:
        raise RunError(f"'{path}' is not valid JSON ({exc.msg}, line {exc.lineno}): re-run the command.") from None


def check_same_settings(folder: Path, saved: dict, identity: dict) -> None:
    """--resume: the settings saved in a run folder must be this run's; name the ones that differ."""
    if saved != identity:
        diff = ", ".join(k for k in sorted(set(identity) | set(saved)) if saved.get(k) != identity.get(k))
        raise RunError(f"--resume: '{folder}' was started with different settings ({diff}): use a new --out, "
                       "or the same settings.")
