"""Finished jobs of a run, one atomic file each under <run>/jobs/, so an interrupted run resumes where it stopped.

gradnorm's jobs are (placement, seed) pairs of minutes each; a crash or Ctrl-C on the last one must not cost the
others. The folder also records the settings that produced them: a resume with other settings is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError
from layerprobe.runs.folder import check_same_settings, read_json, write_json

IDENTITY = "identity.json"


class JobStore:
    """<run>/jobs/: identity.json (the settings) and <job>.json per finished job."""

    def __init__(self, folder: Path, identity: dict, resume: bool, owner: bool = True) -> None:
        """owner: the one process (rank 0) that checks or starts the store; the others only read and add."""
        self.dir = folder / "jobs"
        identity = json.loads(json.dumps(identity, default=str))  # as it reads back: tuples are lists
        if not owner:
            return
        saved_file = self.dir / IDENTITY
        if resume:
            if not saved_file.is_file():
                raise RunError(f"--resume: '{folder}' holds no unfinished run (no jobs/{IDENTITY}): run without "
                               "--resume, with --overwrite to reuse the folder.")
            check_same_settings(folder, read_json(saved_file), identity)
            return
        self.clear()  # --overwrite of an older run: its jobs are not this run's
        write_json(saved_file, identity)

    def _path(self, name: str) -> Path:
        return self.dir / f"{name}.json"

    def load(self, name: str) -> Any:
        """The saved result of job `name`, or None when it has not finished."""
        path = self._path(name)
        return read_json(path) if path.is_file() else None

    def save(self, name: str, result: Any) -> None:
        write_json(self._path(name), result)

    def clear(self) -> None:
        """Drop the store once the run's outputs are written (a finished run needs no resume)."""
        if self.dir.is_dir():
            for path in self.dir.glob("*.json"):
                path.unlink()
            if not any(self.dir.iterdir()):
                self.dir.rmdir()
