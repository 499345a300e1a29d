"""`layerprobe demo` writes a run folder of its own (reports/demo-run, a timestamped sibling once that exists), never
the committed reference reports/demo, and its last line says how to compare the two. The measurements are replaced
by a stand-in that claims its folder the way run_demo does (the real demo: tests/test_report_compare.py)."""

from __future__ import annotations

import inspect
from pathlib import Path

from layerprobe.commands import demo as demo_command
from layerprobe.config import DEMO_OUT, DEMO_REFERENCE
from layerprobe.runs.folder import prepare_run_dir, release_run_dir

from tests.helpers import invoke


def _stand_in(asked: list):
    def run_demo(out, quick, overwrite, progress, resume=False):
        asked.append(out)
        folder = prepare_run_dir(out, overwrite=overwrite)
        (folder / "report.html").write_text("<html></html>")
        release_run_dir(folder)
        return demo_command.DemoRun(folder, folder / "report.html", [])

    return run_demo


def test_demo_writes_its_own_folder_and_says_how_to_compare(monkeypatch):
    assert inspect.signature(demo_command.run_demo).parameters["out"].default == DEMO_OUT != DEMO_REFERENCE
    reference = Path(DEMO_REFERENCE) / "angular"
    reference.mkdir(parents=True)  # the committed reference, in the test's own working directory
    (reference / "summary.json").write_text("{}")
    asked: list = []
    monkeypatch.setattr(demo_command, "run_demo", _stand_in(asked))

    first = invoke("demo")
    assert first.exit_code == 0, first.output
    assert asked == [DEMO_OUT] and Path(DEMO_OUT, "report.html").is_file()
    assert first.output.splitlines()[-1] == f"check against the committed reference: layerprobe compare {DEMO_REFERENCE} {DEMO_OUT}"
    assert (reference / "summary.json").read_text() == "{}" and sorted(Path(DEMO_REFERENCE).iterdir()) == [reference]

    second = invoke("demo", "--quick")  # reports/demo-run exists: a timestamped sibling, the first run kept
    assert second.exit_code == 0, second.output
    last = second.output.splitlines()[-1]
    sibling = last.split(f"compare {DEMO_REFERENCE} ")[1].split()[0]
    assert sibling.startswith(f"{DEMO_OUT}-") and Path(sibling, "report.html").is_file()
    assert last.endswith("--tolerance angular=0.03 --tolerance prune=0.25 --tolerance gradnorm=0.5 --tolerance variance=0.5")

    mine = invoke("demo", "--out", "elsewhere/demo")  # --out is honoured
    assert mine.exit_code == 0 and Path("elsewhere/demo/report.html").is_file()
    assert mine.output.splitlines()[-1].endswith(f"compare {DEMO_REFERENCE} elsewhere/demo")
