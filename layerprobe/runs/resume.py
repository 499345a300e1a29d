"""Resume stores: finished work saved atomically as it completes, with the settings that produced it, so an
interrupted run continues where it stopped and a resume with other settings is refused.

- Ledger (prune): prune.csv, rewritten after every finished variant or batch, and state.json (sums, baseline).
- JobStore (gradnorm): <run>/jobs/identity.json and <job>.json per finished (placement, seed) job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError, first_line
from layerprobe.runs.folder import (LOCK, atomic_write_bytes, check_owned, check_same_settings, name_of, read_json,
                                    write_csv, write_json)
from layerprobe.settings import RESOLVED  # identity keys of what a setting came to on the machine (Mark.resolved)

IDENTITY = "identity.json"


def check_resume(folder: Path, command: Any, config: Any, finished_resumes: bool = False) -> None:
    """--resume, checked before the folder or the model is touched: the folder holds this command's (its record's)
    run, started
    with the same settings (every setting marked as changing the numbers, settings.identity). A finished run is
    refused unless `finished_resumes` (a sweep: resuming it rewrites the outputs a fresh run would). A folder
    with no saved work (killed before its first save) resumes from the start."""
    command = name_of(command)
    if resume_state(folder, command, config) == "finished" and not finished_resumes:
        raise RunError(f"--resume: '{folder}' holds a finished {command} run: nothing to resume. Run without "
                       "--resume (a new folder), or with --overwrite to replace it.")


def resume_state(folder: Path, command: Any, config: Any) -> str:
    """What --resume finds in `folder` for `command` run with `config`: "missing" (no folder), "finished" (its
    manifest.json and no lock) or "unfinished", after checking that the folder holds only this command's files and
    that what it saved was started with the same settings (a RunError naming the first that differ)."""
    from layerprobe.settings import identity

    if not folder.is_dir():
        return "missing"  # prepare_run_dir names the missing folder
    check_owned(folder, command, "--resume")  # this command's run, and only files layerprobe wrote
    now = identity(config)
    manifest = folder / "manifest.json"
    finished = manifest.is_file() and not (folder / LOCK).is_file()
    saved = (identity(type(config), saved=read_json(manifest).get("config") or {}) if manifest.is_file()
             else _stored_identity(folder))
    if saved is not None:
        saved = {k: v for k, v in saved.items() if not k.startswith(RESOLVED) and k != "sums"}
        check_same_settings(folder, saved, now)
    from layerprobe.evaluation import records

    records.read_frame(folder)  # a damaged records file is one line now, before the folder is claimed: a finished
    # run refused here stays finished (not locked as unfinished by the failed resume)
    return "finished" if finished else "unfinished"


def _stored_identity(folder: Path) -> dict | None:
    """The identity an unfinished run saved with its work (state.json, jobs/identity.json, pass.safetensors)."""
    state, jobs, sums = folder / "state.json", folder / "jobs" / IDENTITY, folder / PassCheckpoint.FILE
    if state.is_file():
        return read_json(state).get("identity")
    if jobs.is_file():
        return read_json(jobs)
    if sums.is_file():
        return PassCheckpoint.saved_identity(sums)
    return None


def as_saved(identity: dict) -> dict:
    """The settings as they read back from JSON (tuples become lists), so a comparison is exact."""
    return json.loads(json.dumps(identity, default=str))


class Ledger:
    """A sweep's rows (<run>/<table>.csv) and its resume state (<run>/state.json, which holds the settings)."""

    def __init__(self, folder: Path, identity: dict, resume: bool, columns: list[str], table: str) -> None:
        import pandas as pd

        import time

        self.folder, self.identity, self.columns = folder, as_saved(identity), columns
        self.clock, self.started = time.perf_counter, time.perf_counter()
        self.csv = folder / f"{table}.csv"
        self.rows: list[dict] = []
        self.state: dict = {}
        state_file = folder / "state.json"
        if resume and state_file.exists():
            self.state = read_json(state_file)
            check_same_settings(folder, self.state.get("identity", {}), self.identity)
            if self.csv.exists():
                try:
                    table = pd.read_csv(self.csv)
                except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
                    raise RunError(f"'{self.csv}' is not a readable CSV ({first_line(exc)}): restore it, or run "
                                   "again without --resume.") from None
                # a row cut off (by a copy, a full disk) has empty values: dropped, so its variant is scored again
                whole = table.dropna(subset=[c for c in ("removed", "metric", "pruned", "delta") if c in table])
                self.rows = whole.to_dict("records")
        self.records: list[dict] = []  # per-document records (evaluation/records.py), of finished variants only
        if resume:
            from layerprobe.evaluation import records

            # the unpruned rows are saved before any variant's (and before an lm-eval sweep's baseline)
            done = self.done()
            kept = done | ({records.UNPRUNED} if done or self.state.get("baseline") is not None else set())
            kept |= {records.healed_label(label) for label in self.state.get("healed", {})}  # a healed curve's sets
            self.records = [r for r in records.read(folder) or [] if str(r["removed"]) in kept]

    def done(self) -> set[str]:
        return {str(r["removed"]) for r in self.rows}

    def seconds(self) -> float:
        """This sweep's working time: the earlier, interrupted parts' (saved with the state) and this one's."""
        return float(self.state.get("seconds_before", 0.0)) + self.clock() - self.started

    def save_state(self, **state: Any) -> None:
        before = float(self.state.get("seconds_before", 0.0))
        self.state.update(state, identity=self.identity)
        write_json(self.folder / "state.json", {**self.state, "seconds_before": before + self.clock() - self.started})

    def add_records(self, label: str, rows: list[dict]) -> None:
        """One variant's (or the unpruned model's) per-document records, saved before its scores are: a variant
        counts as done only with its records on disk."""
        from layerprobe.evaluation import records

        if rows:
            self.records = [r for r in self.records if r["removed"] != label] + [{"removed": label, **r} for r in rows]
            records.write(self.folder, self.records)

    def add(self, rows: list[dict]) -> None:
        import pandas as pd

        self.rows.extend(rows)
        write_csv(self.csv, pd.DataFrame(self.rows, columns=self.columns))


class JobStore:
    """<run>/jobs/: identity.json (the settings) and <job>.json per finished job."""

    def __init__(self, folder: Path, identity: dict, resume: bool, owner: bool = True) -> None:
        """owner: the one process (rank 0) that checks or starts the store; the others only read and add."""
        self.dir = folder / "jobs"
        identity = as_saved(identity)
        if not owner:
            return
        saved_file = self.dir / IDENTITY
        if resume and saved_file.is_file():
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


class PassCheckpoint:
    """<run>/pass.safetensors: a streaming pass's running sums and samples (tensors, never a pickle), its counters
    and settings in the metadata. Saved atomically at most every `every` seconds; a resume with other settings is
    refused; removed once the run's outputs are written."""

    FILE = "pass.safetensors"

    def __init__(self, folder: Path, identity: dict, every: float = 60.0) -> None:
        import time

        self.path, self.identity, self.every = folder / self.FILE, as_saved(identity), every
        self.clock = time.monotonic
        self.saved_at = self.clock()

    @staticmethod
    def saved_identity(path: Path) -> dict:
        """The settings a saved pass was started with, from the file's header alone."""
        try:
            with open(path, "rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                header = json.loads(handle.read(size))
            return json.loads(header["__metadata__"]["identity"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunError(f"'{path}' is unreadable ({exc}): run again without --resume.") from None

    def load(self) -> tuple[dict, dict] | None:
        """(tensors, counters) of the last save, or None when there is none."""
        from safetensors import SafetensorError
        from safetensors.torch import load

        if not self.path.is_file():
            return None
        try:
            data = self.path.read_bytes()
            tensors = load(data)
            header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])["__metadata__"]
        except (OSError, SafetensorError, ValueError, KeyError) as exc:
            raise RunError(f"'{self.path}' is unreadable ({exc}): run again without --resume.") from None
        check_same_settings(self.path.parent, json.loads(header["identity"]), self.identity)
        return tensors, json.loads(header["counters"])

    def due(self) -> bool:
        """A save is due: `every` seconds have passed since the last one."""
        return self.clock() - self.saved_at >= self.every

    def save(self, tensors: dict, counters: dict, force: bool = False) -> None:
        from safetensors.torch import save

        if not force and not self.due():
            return
        metadata = {"identity": json.dumps(self.identity), "counters": json.dumps(counters)}
        atomic_write_bytes(self.path, save({k: v.contiguous().cpu() for k, v in tensors.items()}, metadata=metadata))
        self.saved_at = self.clock()

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
