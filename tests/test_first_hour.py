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
import sys
from typer.testing import CliRunner
from layerprobe.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(result.exit_code, "torch" in sys.modules, "transformers" in sys.modules)
print(" ".join(result.output.split()))
"""


@pytest.mark.parametrize("args, needle", [
    (["heal", "smollm2", "--remove", "0-40"], "--remove 0-40 out of range: the model has layers 0..29."),
    (["heal", "SmolLM2", "--remove", "3,35"], "--remove 35 out of range: the model has layers 0..29."),
    (["heal", "gemma3", "--remove", "18"], "the model has layers 0..17."),
    (["prune", "smollm2", "--task", "kl", "--layers", "0,31"], "0..29"),
    (["prune", "smollm2", "--task", "kl", "--block", "40"], "--block 40 would remove the whole 30-layer model"),
    (["prune", "minilm", "--task", "drift", "--layers", "6"], "0..5"),
])
def test_layer_ranges_are_refused_from_the_config_before_torch_loads(args, needle):
    """The block count comes from the config (config.json, the GGUF header): the refusal names the model's layers
    without importing torch or transformers, let alone loading weights (issue 49: it took 28 s)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", REFUSED_EARLY, *args, "--dataset", "builtin"], capture_output=True,
                          text=True, timeout=120)
    status, output = done.stdout.splitlines()[0], "\n".join(done.stdout.splitlines()[1:])
    assert status == "2 False False", done.stdout + done.stderr
    assert needle in output, output
