"""The README and docs/ against the code: flags that exist, links that resolve, the README's two commands.

Fast and offline: reads Markdown and asks the Typer app for each command's --help; no model is loaded.
docs/cli.md and docs/outputs.md are generated from the code and checked elsewhere.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerprobe.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GENERATED = {"cli.md", "outputs.md"}
DOCS = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)]
MAX_README_LINES = 260

FENCE = re.compile(r"^[ \t]*```([\w-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, indented ones (inside list items) included."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


@lru_cache(maxsize=None)
def commands() -> tuple[str, ...]:
    import typer.main

    return tuple(sorted(typer.main.get_command(app).commands))


@lru_cache(maxsize=None)
def help_flags(command: str) -> frozenset[str]:
    """Every --flag that `layerprobe COMMAND --help` prints."""
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert result.exit_code == 0, result.output
    return frozenset(FLAG.findall(result.output))


def command_lines(text: str) -> list[str]:
    """Command lines of layerprobe in fenced blocks (continuations joined) and in inline code spans."""
    lines = []
    for _, body in fenced_blocks(text):
        lines += body.replace("\\\n", " ").splitlines()
    lines += [span for span in INLINE_CODE.findall(prose(text)) if span.startswith("layerprobe ")]
    return lines


def invocations(line: str) -> list[tuple[str, str]]:
    """(command, its arguments) for each `layerprobe COMMAND ...` in a shell line (after env vars, `run:`,
    `$(which layerprobe)`), its arguments cut at a comment or the next shell operator."""
    names = "|".join(commands())
    found = []
    for m in re.finditer(rf"(?<![\w./-])layerprobe\)?[ \t]+({names})(?![\w-])", line):
        rest = line[m.end():]
        rest = re.split(r"[ \t]#|&&|\|\||[;|>]", rest, maxsplit=1)[0]
        found.append((m.group(1), rest.strip()))
    return found


def documented_flags() -> list[tuple[str, str, str, str]]:
    """(file, command, flag, line) for every flag written after `layerprobe COMMAND` in the docs."""
    rows = []
    for path in DOCS:
        for line in command_lines(path.read_text()):
            for command, args in invocations(line):
                rows += [(rel(path), command, flag, line.strip()) for flag in FLAG.findall(args)]
    return rows


def test_the_docs_show_command_lines():
    """The parser finds the documented commands (a parser that finds nothing would pass everything)."""
    rows = documented_flags()
    seen = {command for _, command, _, _ in rows}
    assert {"angular", "prune", "export", "compare", "merge", "gradnorm"} <= seen, seen
    assert ("docs/ci.md", "compare", "--out") in {(f, c, flag) for f, c, flag, _ in rows}


def test_every_documented_flag_is_in_help():
    wrong = [f"{file}: `layerprobe {command}` has no {flag} ({line})"
             for file, command, flag, line in documented_flags() if flag not in help_flags(command)]
    assert not wrong, "\n".join(wrong)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|!?\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(prose(path.read_text()))}


def test_relative_links_and_images_resolve():
    broken = []
    for path in DOCS:
        for target in LINK.findall(prose(path.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{rel(path)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{rel(path)}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, "\n".join(broken)


def test_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; details go to docs/ (limit {MAX_README_LINES})"


def test_readme_opens_with_the_run_and_test_commands():
    """The first two bash blocks are "Run it" (the demo) and "Test it", whose pytest is exactly what CI runs."""
    bash = [body.strip() for language, body in fenced_blocks(README.read_text()) if language == "bash"]
    assert len(bash) >= 2
    run, test = bash[:2]
    assert "\n" not in run and "\n" not in test, "each is one copy-paste line"
    assert run.endswith("layerprobe demo"), run
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("python -m pytest")]
    assert ci == ["python -m pytest -q -n 2 --dist loadfile"], ci
    assert test.endswith(" && " + ci[0]), test
    text = README.read_text()
    assert text.index(run) < text.index("**Test it**") < text.index(test), "Run it first, then Test it"


@pytest.mark.parametrize("line, expected", [
    ("HF_HUB_OFFLINE=1 layerprobe demo --quick", [("demo", "--quick")]),
    ("torchrun --nproc_per_node 8 $(which layerprobe) angular m --tokens 9  # note --x", [("angular", "m --tokens 9")]),
    ("run: layerprobe compare a b --out c.md > /dev/null", [("compare", "a b --out c.md")]),
    ("pip install 'layerprobe[eval]' && python -m layerprobe_x prune", []),
])
def test_invocations_parser(line, expected):
    assert invocations(line) == expected
