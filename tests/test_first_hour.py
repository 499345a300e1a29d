"""Issue 49, a researcher's first hour: what a newcomer meets outside the demo's resume (tests/test_demo_resume.py)."""

from __future__ import annotations

import shutil

import pytest

from layerprobe.runs.folder import LOCK

from .helpers import DEMO_REFERENCE, invoke


def test_report_names_every_run_it_leaves_out_with_the_reason(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(DEMO_REFERENCE / "angular", runs / "angular")
    shutil.copytree(DEMO_REFERENCE / "gradnorm", runs / "gradnorm")
    broken = shutil.copytree(DEMO_REFERENCE / "prune-drift", runs / "broken")
    (broken / "manifest.json").write_text("{not json")
    unfinished = runs / "cut"
    unfinished.mkdir()
    (unfinished / LOCK).write_text("unfinished\ncommand angular\n")
    half = shutil.copytree(DEMO_REFERENCE / "smollm2-angular", runs / "half")
    (half / LOCK).write_text("unfinished\ncommand angular\n")  # a resumed run, rewriting its outputs

    result = invoke("report", runs, "--out", tmp_path / "page")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "2 run(s)" in text
    assert f"left out {broken}: '{broken / 'manifest.json'}' is not valid JSON" in text, text
    assert f"left out {unfinished}: an unfinished run (its {LOCK} is there" in text, text
    assert f"left out {half}: '{half}' is an unfinished run" in text, text
    page = (tmp_path / "page" / "report.md").read_text()
    assert "## Left out" in page and all(str(p) in page for p in (broken, unfinished, half))


REFUSED_EARLY = """
import json, sys
from typer.testing import CliRunner
from layerprobe.cli import app
for args in json.loads(sys.argv[1]):  # one command line after another; torch loaded by any shows in it and after it
    result = CliRunner().invoke(app, args)
    print(json.dumps([result.exit_code, "torch" in sys.modules, "transformers" in sys.modules,
                      " ".join(result.output.split())]))
"""


REFUSED = [  # command line -> what its refusal says
    (["heal", "smollm2", "--remove", "0-40"], "--remove 0-40 out of range: the model has layers 0..29."),
    (["heal", "SmolLM2", "--remove", "3,35"], "--remove 35 out of range: the model has layers 0..29."),
    (["heal", "gemma3", "--remove", "18"], "the model has layers 0..17."),
    (["prune", "smollm2", "--task", "kl", "--layers", "0,31"], "0..29"),
    (["prune", "smollm2", "--task", "kl", "--block", "40"], "--block 40 would remove the whole 30-layer model"),
    (["prune", "minilm", "--task", "drift", "--layers", "6"], "0..5"),
]


def test_layer_ranges_are_refused_from_the_config_before_torch_loads():
    """The block count comes from the config (config.json, the GGUF header): the refusal names the model's layers
    without importing torch or transformers, let alone loading weights (issue 49: it took 28 s). All the command
    lines in one fresh process, one after another: torch imported by any of them would show from there on."""
    import json
    import subprocess
    import sys

    lines = [[*args, "--dataset", "builtin"] for args, _ in REFUSED]
    done = subprocess.run([sys.executable, "-c", REFUSED_EARLY, json.dumps(lines)], capture_output=True, text=True,
                          timeout=120)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(REFUSED), done.stdout + done.stderr
    for (args, needle), (code, torch_loaded, transformers_loaded, output) in zip(REFUSED, results):
        assert (code, torch_loaded, transformers_loaded) == (2, False, False), (args, output)
        assert needle in output, (args, output)
