"""The checks of what a run writes against its command's record (each key of summary.json, its type and meaning,
with a schema_version; each CSV and its columns), and docs/outputs.md rendered from the records.

write_run checks a summary and its tables against the command's record before anything is written (an undeclared key, a
missing required key or a value of the wrong type is a bug, never a file), readers can rely on the declared keys,
and docs/outputs.md is rendered from here (`python -m layerprobe.runs.schema > docs/outputs.md`, checked by a test).
A new summary key is one Key line in its command's record.
"""

from __future__ import annotations

from typing import Any

from layerprobe.errors import RunError, article
from layerprobe.runs.keys import CORPUS, MODEL, RUN, SUMMARIES, Key  # noqa: F401 (the names a record builds on)

SCHEMA_VERSION = 1  # bumped when a key changes meaning or goes; new keys keep the version


def check_summary(command: str, summary: dict) -> dict:
    """The summary with its schema_version, after checking it against the command's record."""
    keys = {key.name: key for key in SUMMARIES[command]}
    summary = {**summary, "schema_version": SCHEMA_VERSION}
    unknown = sorted(set(summary) - set(keys))
    missing = sorted(k for k, key in keys.items() if key.required and k not in summary)
    wrong = sorted(k for k, v in summary.items() if k in keys and not _fits(v, keys[k]))
    if unknown or missing or wrong:
        raise RunError(f"The {command} summary breaks its schema (undeclared {unknown}, missing {missing}, wrong "
                       f"type {wrong}): please report this; each key is declared in its command's record.")
    return summary


def check_tables(command: str, tables: dict[str, Any]) -> None:
    """Refuse a CSV (by stem) that no record declares, or a column its file's record does not list: what a run
    writes is what docs/outputs.md says, and readers (report, compare, load_run) can rely on it."""
    from layerprobe.runs.columns import TABLES, names

    for stem, frame in tables.items():
        table = TABLES.get(f"{stem}.csv")
        undeclared = [] if table is None else [c for c in frame.columns if c not in names(table.columns)]
        if table is None or undeclared:
            what = f"{stem}.csv, which no record declares" if table is None else f"{stem}.csv's {undeclared}"
            raise RunError(f"The {command} run would write {what}: please report this; each file and column a run "
                           f"writes is declared in its command's record (a Table or Column).")


def check_read_summary(path: Any, command: str, summary: dict, reads: tuple[str, ...] = ()) -> None:
    """A summary.json read back holds the keys its readers index (`reads`, the command's Kind.reads) and every
    declared key it has is of its declared type: else one line naming the file and the key. Keys added since an
    older run was written may be absent (the committed runs lack some); keys this version does not declare (a newer
    layerprobe's) are left alone."""
    keys = {key.name: key for key in SUMMARIES.get(command, ())}
    missing = [k for k in reads if k not in summary]
    wrong = [k for k, v in summary.items() if k in keys and not _fits(v, keys[k])]
    if missing or wrong:
        key = (missing or wrong)[0]
        what = (f"lacks the key '{key}'" if missing else
                f"has '{key}' = {str(summary[key])[:30]}, not {'/'.join(t.__name__ for t in keys[key].types)}")
        meaning = f" ({keys[key].meaning[:60]})" if key in keys else ""
        raise RunError(f"'{path}' {what}{meaning}: it is damaged or not {article(command)} {command} summary; re-run "
                       "the command, or restore the file.")


def check_known_keys(path: Any, command: str, summary: dict) -> None:
    """A summary.json that a command carries on (merge writes its shards' facts into the merged run) holds only keys
    this version declares: a newer layerprobe's setting (or an edit) is one line naming it, never dropped or carried
    on unread (check_read_summary leaves such keys alone for the commands that only read)."""
    unknown = sorted(set(summary) - {key.name for key in SUMMARIES.get(command, ())})
    if unknown:
        raise RunError(f"'{path}' holds key{'s' if len(unknown) > 1 else ''} this layerprobe version does not know "
                       f"({', '.join(unknown[:5])}): it was written by a newer layerprobe (or edited); use that "
                       "version, or upgrade.")


def _fits(value: Any, key: Key) -> bool:
    if value is None:
        return key.optional
    if isinstance(value, bool) and bool not in key.types:
        return False
    return isinstance(value, key.types)


def render_outputs() -> str:
    """docs/outputs.md: every command's summary.json keys, with type and meaning."""
    lines = ["# Output records", "",
             "Generated from `layerprobe/runs/schema.py` (`python -m layerprobe.runs.schema > docs/outputs.md`). Every "
             f"run folder holds `summary.json` (this record, `schema_version` {SCHEMA_VERSION}), `manifest.json` "
             "(versions, command line and working directory, the resolved settings, the files the run wrote: what a "
             "later --overwrite or --resume may replace) and its CSVs and figures. A key marked optional may be "
             "null; one marked 'some runs' is written only where it applies.", ""]
    for command, keys in SUMMARIES.items():
        lines += [f"## `{command}` summary.json", "", "| key | type | meaning |", "|---|---|---|"]
        for key in keys:
            kind = "/".join(t.__name__ for t in key.types) + (" or null" if key.optional else "")
            note = "" if key.required else " (some runs)"
            lines.append(f"| `{key.name}` | {kind} | {key.meaning}{note} |")
        lines.append("")
    from layerprobe.runs.columns import render_columns

    return "\n".join(lines) + "\n# CSV columns\n\n" + render_columns()


if __name__ == "__main__":
    print(render_outputs(), end="")  # SUMMARIES is runs/keys.py's, filled when layerprobe was imported
