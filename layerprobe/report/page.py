"""write_report(runs, out): report.html (self-contained, images embedded) and report.md (images beside it)."""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import RunError, check_path
from layerprobe.plots.overlay import overlay_figure
from layerprobe.report.findings import conflicts, describe, findings
from layerprobe.runs.folder import (atomic_write_bytes, atomic_write_text, check_file_owned, check_out_apart,
                                    is_report_page, save_figure)
from layerprobe.runs.kinds import KINDS
from layerprobe.runs.read import Run, find_runs

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;
color:#1d1d1f;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin:1em 0 .4em} .muted{color:#666;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
th{background:#f4f4f6} td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eee} .grid{display:flex;flex-wrap:wrap;gap:1.5em}
.grid>section{flex:1 1 520px;min-width:0} .grid>section.wide{flex-basis:100%} ul.findings li{margin:.25em 0}
details{margin:.5em 0} summary{cursor:pointer;color:#333} .scroll{overflow-x:auto}
"""


@dataclass
class Report:
    html: Path
    markdown: Path
    figures: list[Path]
    runs: int
    skipped: list = field(default_factory=list)  # (folder, reason) of each run below a given folder left out


PLACEMENT_NAMES = {"pre": "Pre-LN", "post": "Post-LN", "peri": "Peri-LN", "mix": "Mix-LN"}


def _figures(runs: list[Run], folder: Path) -> list[tuple[str, Path]]:
    """Overlay plots when several runs of one command are side by side (x = relative depth)."""
    made = []
    for command, kind in KINDS.items():
        group = [r for r in runs if r.command == command]
        if kind.overlay is None or len(group) < 2:
            continue
        series = []
        for run in group:
            x, y = kind.function("overlay")(run)
            placement = run.summary.get("placement")  # the lines' point: where each model normalizes
            label = f"{run.label}, {PLACEMENT_NAMES[placement]}" if placement in PLACEMENT_NAMES else run.label
            series.append((label, x, y, int(run.summary.get("num_layers") or len(x))))
        ylabel, title = kind.overlay_axis
        path = folder / f"overlay_{command}"
        save_figure(path, overlay_figure(series, ylabel, title), ("png",))
        made.append((title, path.with_suffix(".png")))
    return made


def _img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _html_table(frame: Any) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in frame.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _md_table(frame: Any) -> str:
    lines = ["| " + " | ".join(_md(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(_md(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _md(value: Any) -> str:
    """A Markdown table cell: numbers as in the HTML, text as written (no HTML entities), pipes escaped."""
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return html.escape(str(value))


def check_report_owned(out: Path, overwrite: bool = False) -> None:
    """report.html, report.md and report_files/ in `out` are replaced only when layerprobe wrote them (or with
    --overwrite): a user's page of the same name is one line, nothing written."""
    for name in ("report.html", "report.md"):
        check_file_owned(out / name, is_report_page, "--out", overwrite)
    assets = out / "report_files"
    pages = [p for p in (out / "report.html", out / "report.md") if p.is_file()]
    found = sorted(p for p in assets.rglob("*") if p.is_file()) if assets.is_dir() else []
    if found and not pages and not overwrite:
        raise RunError(f"'{found[0]}' is already there and layerprobe did not write it (no report beside it): move "
                       "it away, pass another --out, or pass --overwrite to replace it.")


def write_report(runs: list[Run], out: Path, title: str = "layerprobe report", overwrite: bool = False,
                 skipped: list | None = None) -> Report:
    """One page for one or more runs; same-command runs sit side by side, with overlays across them. The title
    starts 'layerprobe report' (report_runs): a later report knows the page as layerprobe's by it. `skipped`:
    (folder, reason) of the runs left out, named on the page."""
    check_report_owned(out, overwrite)
    try:
        out.mkdir(parents=True, exist_ok=True)
        assets = out / "report_files"
        assets.mkdir(exist_ok=True)
    except OSError as exc:
        raise RunError(f"Report folder '{out}' cannot be created or written ({exc.strerror or exc}): pass a writable "
                       "folder with --out.") from None
    overlays = _figures(runs, assets)
    body_html = [f"<h1>{html.escape(title)}</h1>",
                 f'<p class="muted">{len(runs)} run(s): ' + ", ".join(html.escape(r.label) for r in runs) + "</p>"]
    body_md = [f"# {title}", "", f"{len(runs)} run(s): " + ", ".join(r.label for r in runs), ""]
    if skipped:
        left = [f"{folder}: {reason}" for folder, reason in skipped]
        body_html += ["<h2>Left out</h2>",
                      '<ul class="findings">' + "".join(f"<li>{html.escape(n)}</li>" for n in left) + "</ul>"]
        body_md += ["## Left out", ""] + [f"- {n}" for n in left] + [""]
    disagree = conflicts(runs)
    if disagree:
        body_html += ["<h2>Where the signals disagree</h2>",
                      '<ul class="findings">' + "".join(f"<li>{html.escape(n)}</li>" for n in disagree) + "</ul>"]
        body_md += ["## Where the signals disagree", ""] + [f"- {n}" for n in disagree] + [""]
    for caption, path in overlays:
        body_html += [f"<h2>{html.escape(caption)}</h2>", _img_tag(path, caption)]
        body_md += [f"## {caption}", "", f"![{caption}](report_files/{path.name})", ""]
    figures = [p for _, p in overlays]
    for command, kind in KINDS.items():
        group = [r for r in runs if r.command == command]
        if not group:
            continue
        heading = kind.heading
        shared = kind.function("shared_plots")(group, assets) if kind.shared_plots else {}
        body_html += [f"<h2>{heading}</h2>", '<div class="grid">']
        body_md += [f"## {heading}", ""]
        for index, run in enumerate(group):
            header = describe(run)
            notes = findings(run)
            wide = kind.wide_past is not None and (run.summary.get("num_layers") or 0) > kind.wide_past
            opening = '<section class="wide">' if wide else "<section>"
            body_html.append(f"{opening}<h3>{html.escape(run.label)}</h3>")
            body_html.append('<ul class="findings">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
            body_md += [f"### {run.label}", ""] + [f"- {n}" for n in notes] + [""]
            plot = shared.get(index) or run.plot()
            if plot is not None:
                name = plot.name if index in shared else f"{command}_{index}_{plot.name}"
                if index not in shared:
                    atomic_write_bytes(assets / name, plot.read_bytes())
                figures.append(assets / name)
                body_html.append(_img_tag(plot, f"{command} plot of {run.label}"))
                body_md += [f"![{command} plot of {run.label}](report_files/{name})", ""]
            fact_table = "".join(f"<tr><td>{html.escape(k)}</td><td>{_cell(v)}</td></tr>" for k, v in header)
            body_html.append(f"<details><summary>Run facts</summary><table>{fact_table}</table>"
                             f'<p class="muted">{html.escape(str(run.folder))}</p></details>')
            table = kind.function("data_table")(run)
            body_html.append(f"<details open><summary>Per-layer numbers</summary><div class=\"scroll\">"
                             f"{_html_table(table)}</div></details>")
            body_html.append("</section>")
            body_md += ["| fact | value |", "|---|---|"] + [f"| {_md(k)} | {_md(v)} |" for k, v in header] + [""]
            body_md += [_md_table(table), ""]
        body_html.append("</div>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body_html) + "\n</body></html>\n")
    atomic_write_text(out / "report.html", page)
    atomic_write_text(out / "report.md", "\n".join(body_md))
    return Report(out / "report.html", out / "report.md", figures, len(runs), list(skipped or []))


def name_alike(runs: list[Run]) -> None:
    """Runs that would carry one label (`report baseline new`: both 'minilm') get their folder's name added, and
    its parent's when the names are alike too."""
    from collections import Counter

    for depth in (1, 2):
        counts = Counter(r.label for r in runs)
        for run in runs:
            if counts[run.label] > 1:
                where = run.folder.name if depth == 1 else "/".join(run.folder.resolve().parts[-2:])
                run.alias = f"{run.base_label} [{where}]"


def report_runs(paths: list[str], out: str | None = None, overwrite: bool = False) -> Report:
    """Load runs (or folders of runs) and write the page; default out: the runs' common parent folder."""
    if not paths:
        raise RunError("No run folders given: pass one or more run folders written by layerprobe.")
    for path in paths:
        check_path(path, "report's run folder")
    if out is not None:
        check_path(out, "--out")
    skipped: list = []  # unfinished or unreadable runs below a folder given: left out, each named with its reason
    runs = [run for path in paths for run in find_runs(path, skipped=skipped).values()]
    if out is not None:  # into the one run it reads (report --out RUN), never inside one (RUN/merged) nor into one
        # of several (its folder would hold a page and figures of runs it never made)
        check_out_apart(out, {f"the run folder '{run.label}'": run.folder for run in runs}, may_be=True)
        target = Path(out).expanduser().resolve()
        into = next((run for run in runs if run.folder.resolve() == target), None) if len(runs) > 1 else None
        if into is not None:
            raise RunError(f"--out '{out}' is the run folder '{into.label}', one of the {len(runs)} runs this report "
                           "reads: its folder would hold figures of runs it never made; pass a folder beside the runs "
                           "(or one that holds them).")
    name_alike(runs)
    folder = Path(out) if out else Path(os.path.commonpath([str(r.folder.resolve().parent) for r in runs]))
    if out is None and (folder / "report.html").exists():  # another report's page: kept, this one goes beside it
        folder = next(folder / f"report-{n}" for n in range(2, 10_000) if not (folder / f"report-{n}").exists())
    models = sorted({r.model for r in runs})
    shown = models if len(models) <= 5 else [*models[:4], f"and {len(models) - 4} more"]
    title = f"layerprobe report: {', '.join(shown)}"
    return write_report(runs, folder, title, overwrite, skipped)
