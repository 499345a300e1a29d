"""Compare two runs of one command, metric by metric and layer by layer, against tolerances: a CI verdict.

Tolerances (keys of --tolerance and of [tool.layerprobe.tolerance]) are declared in the commands' records
(Kind.tolerances: key, default, meaning); `layerprobe compare --help` and docs/cli.md list them.

Sampling noise: when both prune (or curve) runs hold per-document records (samples.csv.gz) of the same documents,
a baseline, dP or curve score check fails only when its change is beyond the tolerance AND beyond its paired 95%
interval from the records (a change inside it is sampling noise); the check's `rule` and the verdict say which rule
decided. Records that do not reproduce the tables' numbers, or cover other documents, leave the tolerance alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Iterable
from xml.sax.saxutils import quoteattr

from layerprobe.errors import ConfigError, RunError, article, check_path
from layerprobe.runs.checks import Check, Comparison, outside, relative, same_keys
from layerprobe.runs.compare_columns import COMPARE_RULES, column_checks, declared_tables
from layerprobe.runs.kinds import KINDS, tolerances
from layerprobe.runs.read import Run, find_runs

__all__ = ["COMPARE_RULES", "Check", "Comparison", "column_checks", "compare_folders", "compare_runs", "outside",
           "parse_tolerances", "relative", "render", "same_keys", "settings_changed"]  # the comparers' helpers, here
# since before they moved to checks.py and compare_columns.py

FORMATS = ("text", "markdown", "json", "junit")


def parse_tolerances(pairs: list[str] | None, project: dict | None = None) -> dict[str, float]:
    """Defaults, then the project's [tool.layerprobe.tolerance], then KEY=VALUE flags."""
    declared = {key: t.default for key, t in tolerances().items()}
    tolerance = dict(declared)
    items = list((project or {}).items()) + [_split(p) for p in pairs or []]
    for key, value in items:
        if not isinstance(key, str) or key not in declared:
            raise ConfigError(f"Unknown tolerance '{key}': use {', '.join(declared)} (e.g. --tolerance angular=0.05).")
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            raise ConfigError(f"Tolerance {key}={value!r} is not a number.") from None
        if not number >= 0 or math.isinf(number):
            raise ConfigError(f"Tolerance {key} must be a finite number >= 0, got {value}.")
        tolerance[key] = number
    return tolerance


def _split(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep:
        raise ConfigError(f"--tolerance '{pair}' is not KEY=VALUE, e.g. --tolerance angular=0.05.")
    return key.strip(), value.strip()


def compare_folders(baseline: str, new: str, tolerance: dict[str, float] | None = None,
                    given: Iterable[str] | None = None) -> Comparison:
    """Compare two runs, or two folders of runs paired by their relative paths. tolerance: {key: value} for some of
    the declared keys (the others keep their default), checked as --tolerance KEY=VALUE is; given: the keys the
    user named (None: those tolerance sets to other than their default), each refused where no compared run is
    judged by it (a project's [tool.layerprobe.tolerance] may name keys for every kind of run, and is not)."""
    check_path(baseline, "compare's baseline")
    check_path(new, "compare's new run")
    if tolerance is not None and not isinstance(tolerance, dict):
        raise ConfigError(f"compare's tolerance must be a dict such as {{'angular': 0.05}}, got "
                          f"{type(tolerance).__name__} {repr(tolerance)[:40]}: pass a dict (or None for the defaults).")
    if given is None:  # a library caller: the keys it set to other than their default (a parsed dict holds all)
        defaults = {key: t.default for key, t in tolerances().items()}
        given = [key for key, value in (tolerance or {}).items() if defaults.get(key) != value]
    tolerance = parse_tolerances(None, tolerance)  # the CLI's checks: known keys, finite numbers >= 0
    old_runs, new_runs = find_runs(baseline), find_runs(new)  # a NaN always-measured number: unusable, as for report
    if set(old_runs) != set(new_runs):
        if len(old_runs) == 1 and len(new_runs) == 1:
            old_runs, new_runs = {"": next(iter(old_runs.values()))}, {"": next(iter(new_runs.values()))}
        else:
            only_old = sorted(set(old_runs) - set(new_runs))
            only_new = sorted(set(new_runs) - set(old_runs))
            raise RunError(f"The folders hold different runs (only in baseline: {', '.join(only_old) or '-'}; "
                           f"only in new: {', '.join(only_new) or '-'}): compare matching run folders.")
    unused_tolerances(given, old_runs.values())
    result = Comparison(baseline, new, tolerance=tolerance)
    from pathlib import Path

    if Path(baseline).resolve() == Path(new).resolve():  # said, not refused: a CI step may name one folder twice
        result.untested.append(SAME_FOLDER)
    for name in sorted(old_runs):
        compare_runs(old_runs[name], new_runs[name], tolerance, result, name)
    return result


def unused_tolerances(given: Iterable[str], runs: Iterable[Run]) -> None:
    """One rule for a --tolerance key that does not apply: refused, naming the keys the compared runs are judged by
    (Kind.uses), as an unknown key is."""
    kinds = {run.kind.name: run.kind for run in runs if run.kind.comparer is not None}
    used = list(dict.fromkeys(key for kind in kinds.values() for key in kind.uses))
    if not kinds or not all(kind.uses for kind in kinds.values()):
        return  # a record that names none of the keys its comparer reads: which apply is not known
    for key in given:
        if key not in used:
            raise ConfigError(f"--tolerance {key} does not apply to {', '.join(kinds)} runs: they are judged by "
                              f"{', '.join(used)}; drop {key} or set one of those.")


def compare_runs(old: Run, new: Run, tolerance: dict[str, float], into: Comparison, name: str = "") -> None:
    where = f"'{name}': " if name else ""
    if old.command != new.command:
        raise RunError(f"{where}cannot compare {article(old.command)} {old.command} run with {article(new.command)} "
                       f"{new.command} run: pass two runs of one command.")
    layers_old, layers_new = old.summary.get("num_layers"), new.summary.get("num_layers")
    if layers_old is not None and layers_new is not None and layers_old != layers_new:
        raise RunError(f"{where}the runs have different layer counts ({layers_old} vs {layers_new}): "
                       "layer-by-layer comparison needs the same architecture depth.")
    if old.kind.comparer is None:
        comparable = ", ".join(k.name for k in KINDS.values() if k.comparer)
        raise RunError(f"{where}compare reads {comparable} runs, not {old.command}: pass runs of those.")
    if old.model != new.model:
        into.notes.append(f"{where}models differ: {old.model} -> {new.model}")
    changed = into.changed[name] = settings_changed(old, new)
    if changed:
        into.notes.append(f"{where}settings that change the numbers differ ({', '.join(changed)}): the deltas "
                          "below mix that change with the model's")
    try:
        old.kind.function("comparer")(old, new, tolerance, into, name)
    except KeyError as exc:  # a declared column the comparer reads, missing from a damaged table: one line
        raise lacking(exc, old, new) from None
    declared_tables(old, new, tolerance, into, name)  # every other CSV and column its record declares


def lacking(exc: KeyError, *runs: Run) -> Exception:
    """The RunError for a comparer's KeyError where a run's table lacks that declared column (else the error)."""
    from layerprobe.runs.columns import TABLES

    column = exc.args[0] if exc.args else None
    for run in runs:
        for stem, table in run.tables.items():
            declared = TABLES.get(f"{stem}.csv")
            if declared and column in {c.name for c in declared.columns} and column not in table:
                return RunError(f"'{run.folder / (stem + '.csv')}' lacks the column '{column}': re-run the command, or "
                                "restore the file.")
    return exc


def settings_changed(old: Run, new: Run) -> list[str]:
    """'name a -> b' for each setting marked as changing the numbers (settings.identity) whose value differs between
    the two runs' manifests, and each resolved fact (tokens, seq_len, dtype, device) that differs. A setting whose
    run records what it came to (Mark.recorded: the seq_len used after the model's cap) is named by that, with what
    was asked beside it where they differ; one asked differently that came to the same is no change."""
    from layerprobe.settings import identity, mark_of, walk, where_paths

    settings = old.kind.config_class  # the class the manifests' config is (runs/kinds.py)
    changed = []
    a, b = old.manifest.get("config"), new.manifest.get("config")
    if settings is not None and isinstance(a, dict) and isinstance(b, dict):
        first, second = identity(settings, a), identity(settings, b)
        where = where_paths(settings)  # where the inputs were read, not what was measured
        recorded = {path: mark_of(f).recorded for path, f, _ in walk(settings)
                    if mark_of(f) is not None and mark_of(f).recorded}
        for key in first:
            if key in where or first[key] == second.get(key):
                continue
            used = recorded.get(key)
            x, y = (old.summary.get(used), new.summary.get(used)) if used else (None, None)
            if x is None or y is None:
                changed.append(f"{key} {first[key]} -> {second.get(key)}")
            elif x != y:
                changed.append(f"{key} {x} -> {y} (asked {first[key]} -> {second.get(key)})")
    for key in ("tokens", "seq_len", "dtype", "device"):
        x, y = old.summary.get(key), new.summary.get(key)
        if x is not None and y is not None and x != y and not any(c.split(" ")[0].endswith(key) for c in changed):
            changed.append(f"{key} {x} -> {y}")
    return changed


# ---- rendering ---------------------------------------------------------------------------------------------------

def _metric_table(result: Comparison) -> list[tuple[str, int, int, float]]:
    """(metric, checks, failed, max |delta|) per run and metric."""
    groups: dict[str, list[Check]] = {}
    for check in result.checks:
        groups.setdefault(f"{check.run + ': ' if check.run else ''}{check.metric}", []).append(check)
    return [(k, len(v), sum(c.failed for c in v), max(abs(c.delta) for c in v)) for k, v in groups.items()]


def is_verdict(head: str) -> bool:
    """A file `compare --out` wrote, in any --format, by its first 4 kB: a later compare may replace it."""
    text = head.lstrip()
    if text.startswith(("layerprobe compare ", "### layerprobe compare ")) or '<testsuite name="layerprobe compare"' in head:
        return True
    return text.startswith('{\n  "baseline": ') and '"exit_code": ' in head


def render(result: Comparison, fmt: str, max_rows: int = 50) -> str:
    """The comparison as text, markdown, json or junit XML."""
    if fmt not in FORMATS:
        raise ConfigError(f"Unknown --format '{fmt}': use one of {', '.join(FORMATS)}.")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise ConfigError(f"--max-rows must be a whole number >= 0, got {max_rows!r}.")
    return {"text": _text, "markdown": _markdown, "json": _json, "junit": _junit}[fmt](result, max_rows)


def _rule(result: Comparison) -> str:
    """Which rule decided: the tolerance alone, or (records on both sides) the tolerance and the paired interval."""
    paired = sum(c.rule != "tolerance" for c in result.checks)
    if SAME_FOLDER in result.untested:
        return SAME_FOLDER
    if not paired:
        why = "; ".join(dict.fromkeys(result.untested)) or NO_RECORDS
        return f"tolerance only: {why}"
    return (f"{paired} of {len(result.checks)} checks by tolerance and paired 95% interval (a change inside its "
            "interval is sampling noise), the rest by tolerance")


NO_RECORDS = "the runs do not both hold per-document records"
SAME_FOLDER = ("baseline and new run are the same folder: a run compared with itself is identical by construction, "
               "so this verdict tests nothing")


def _verdict(result: Comparison) -> str:
    failed = len(result.failures)
    if failed:
        return f"REGRESSION: {failed} of {len(result.checks)} checks outside tolerance ({_rule(result)})"
    return f"OK: all {len(result.checks)} checks within tolerance ({_rule(result)})"


def _interval(c: Check) -> str:
    return f", paired 95% interval {c.interval[0]:+.4g} to {c.interval[1]:+.4g}" if c.interval else ""


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _text(result: Comparison, max_rows: int) -> str:
    lines = [f"layerprobe compare {result.baseline} -> {result.new}"]
    lines += [f"note: {n}" for n in result.notes]
    for metric, count, failed, worst in _metric_table(result):
        lines.append(f"  {metric:<28} {count:>5} checks  {failed:>4} failed  max |delta| {_fmt(worst)}")
    for c in result.failures[:max_rows]:
        run = f"{c.run}: " if c.run else ""
        lines.append(f"  FAIL {run}{c.metric} {c.where}: {_fmt(c.old)} -> {_fmt(c.new)} "
                     f"(delta {c.delta:+.4g}, allowed {_fmt(c.limit)}{_interval(c)})")
    if len(result.failures) > max_rows:
        lines.append(f"  ... and {len(result.failures) - max_rows} more")
    lines.append(_verdict(result))
    return "\n".join(lines)


def _markdown(result: Comparison, max_rows: int) -> str:
    icon = ":x:" if result.failures else ":white_check_mark:"
    lines = [f"### layerprobe compare {icon} {_verdict(result)}", "",
             f"Baseline `{result.baseline}`, new `{result.new}`. Tolerances: "
             + ", ".join(f"{k} {v:g}" for k, v in result.tolerance.items()) + ".", ""]
    lines += [f"> {n}" for n in result.notes] + ([""] if result.notes else [])
    lines += ["| metric | checks | failed | max \\|delta\\| |", "|---|---:|---:|---:|"]
    lines += [f"| {m} | {n} | {f} | {_fmt(w)} |" for m, n, f, w in _metric_table(result)]
    if result.failures:
        lines += ["", "| run | metric | where | old | new | delta | allowed |", "|---|---|---|---:|---:|---:|---:|"]
        lines += [f"| {c.run or '.'} | {c.metric} | {c.where} | {_fmt(c.old)} | {_fmt(c.new)} | {c.delta:+.4g} | "
                  f"{_fmt(c.limit)} |" for c in result.failures[:max_rows]]
        if len(result.failures) > max_rows:
            lines.append(f"\n... and {len(result.failures) - max_rows} more (see the json format).")
    return "\n".join(lines) + "\n"


def _json(result: Comparison, max_rows: int) -> str:
    data = {"baseline": result.baseline, "new": result.new, "ok": not result.failures,
            "exit_code": result.exit_code, "tolerance": result.tolerance, "notes": result.notes,
            "checks": len(result.checks), "failed": [asdict(c) for c in result.failures],
            "metrics": [{"metric": m, "checks": n, "failed": f, "max_abs_delta": w} for m, n, f, w in _metric_table(result)]}
    return json.dumps(data, indent=2)


def _junit(result: Comparison, max_rows: int) -> str:
    cases = []
    for c in result.checks:
        classname = quoteattr(f"layerprobe.{c.run + '.' if c.run else ''}{c.metric}")
        body = ""
        if c.failed:
            message = quoteattr(f"{c.old:.6g} -> {c.new:.6g} (delta {c.delta:+.6g}, allowed {c.limit:.6g})")
            body = f"<failure message={message} type=\"regression\"/>"
        cases.append(f"    <testcase classname={classname} name={quoteattr(c.where)}>{body}</testcase>")
    head = (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n  <testsuite name="layerprobe compare" '
            f'tests="{len(result.checks)}" failures="{len(result.failures)}" errors="0">')
    return "\n".join([head, *cases, "  </testsuite>\n</testsuites>"]) + "\n"


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_TOLERANCE":  # the old constant: the records' declarations now
        return {key: t.default for key, t in tolerances().items()}
    raise AttributeError(name)
