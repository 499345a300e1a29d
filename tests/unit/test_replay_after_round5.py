"""The independent replay after round 5 (issue 47), each case as the rule that covers it, on the committed demo's
records (tests/data/demo) copied and damaged by hand; no model is loaded.

- compare of an unfinished run folder says it is unfinished and names the command that finishes it, whatever
  finished runs lie inside it (a curve's angular/), never "cannot compare a curve run with an angular run";
- a curve's own check (its record's Kind.check, run by load_run for every reader) names the damage, file, row and
  column, before export or heal --from-curve names a strategy;
- compare's note names what a setting came to (Mark.recorded: the seq_len used), not only what was asked;
- --overwrite of an older run (no file list) is refused, nothing removed: its files cannot be told from a user's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from layerprobe.errors import RunError
from layerprobe.runs.folder import LOCK
from tests.helpers import DEMO_REFERENCE


@pytest.fixture
def curve(tmp_path) -> Path:
    folder = tmp_path / "curve"
    shutil.copytree(DEMO_REFERENCE / "smollm2-curve-kl", folder)
    return folder


def test_compare_of_an_unfinished_curve_folder_says_unfinished_and_names_the_command(curve, tmp_path):
    from layerprobe.runs.compare import compare_folders

    unfinished = tmp_path / "killed"
    unfinished.mkdir()
    shutil.copytree(DEMO_REFERENCE / "angular", unfinished / "angular")  # the curve's own angular run, finished
    (unfinished / LOCK).write_text("unfinished\ncommand curve\nfile angular/summary.json\n")
    for old, new in ((curve, unfinished), (unfinished, curve)):
        with pytest.raises(RunError) as caught:
            compare_folders(str(old), str(new))
        message = str(caught.value)
        assert f"'{unfinished}' is an unfinished run" in message and "\n" not in message, message
        assert f"`layerprobe prune --curve ... --out {unfinished} --resume`" in message, message
        assert "angular run" not in message, message


@pytest.mark.parametrize("damage, named", [
    ("renamed", "row 1, column strategy: 'angulXr' is none of the strategies summary.json lists"),
    ("dropped", "has no rows of the angular curve(s) summary.json lists"),
])
def test_a_damaged_curve_is_named_before_any_strategy(curve, damage, named):
    from layerprobe.removal import from_curve
    from layerprobe.runs.compare import compare_folders
    from layerprobe.runs.read import load_run

    table = curve / "curve.csv"
    lines = table.read_text().splitlines(keepends=True)
    if damage == "renamed":
        table.write_text("".join(line.replace("angular,", "angulXr,", 1) if line.startswith("angular,") else line
                                 for line in lines))
    else:
        table.write_text("".join(line for line in lines if not line.startswith("angular,")))
    for read in (lambda: from_curve(str(curve), "angular", 1), lambda: load_run(curve),
                 lambda: compare_folders(str(DEMO_REFERENCE / "smollm2-curve-kl"), str(curve))):
        with pytest.raises(RunError) as caught:
            read()
        assert named in str(caught.value) and str(table) in str(caught.value), str(caught.value)


def test_compare_notes_the_seq_len_used_not_only_the_one_asked(tmp_path):
    from layerprobe.runs.compare import compare_folders

    runs = []
    for name, asked, used in (("a", 256, 128), ("b", 512, 128), ("c", 512, 64)):
        folder = tmp_path / name
        shutil.copytree(DEMO_REFERENCE / "angular", folder)
        for file, edit in (("manifest.json", lambda m: m["config"]["data"].update(seq_len=asked)),
                           ("summary.json", lambda s: s.update(seq_len=used))):
            record = json.loads((folder / file).read_text())
            edit(record)
            (folder / file).write_text(json.dumps(record))
        runs.append(str(folder))
    same = compare_folders(runs[0], runs[1])  # asked 256 and 512, both capped at 128: the same numbers
    assert not any("seq_len" in note for note in same.notes), same.notes
    other = compare_folders(runs[0], runs[2])
    assert any("data.seq_len 128 -> 64 (asked 256 -> 512)" in note for note in other.notes), other.notes


def test_the_demo_minilm_angular_without_lens_tokens_compares_without_a_note(tmp_path):
    """The demo now leaves --lens-tokens out for MiniLM (no LM head: a value would be refused); the committed
    reference recorded 512: both came to no lens, so compare notes no change."""
    from layerprobe.runs.compare import compare_folders

    fresh = tmp_path / "angular"
    shutil.copytree(DEMO_REFERENCE / "angular", fresh)
    manifest = json.loads((fresh / "manifest.json").read_text())
    assert json.loads((DEMO_REFERENCE / "angular" / "manifest.json").read_text())["config"]["lens_tokens"] == 512
    manifest["config"]["lens_tokens"] = None
    (fresh / "manifest.json").write_text(json.dumps(manifest))
    result = compare_folders(str(DEMO_REFERENCE / "angular"), str(fresh))
    assert result.notes == [] and result.exit_code == 0, result.notes


def test_overwrite_of_an_older_run_is_refused_with_nothing_removed(tmp_path):
    """A finished run of an older layerprobe (its manifest lists no files, as some committed reports/ runs) replaced
    with --overwrite: its files cannot be told from ones a user added since, so it is refused with nothing removed
    (written over, its curve's angular/ was listed in the new manifest as the new run's own; removed whole, a user's
    file would go)."""
    from layerprobe.commands.prune import CURVE_COMMAND
    from layerprobe.runs.folder import prepare_run_dir, run_files

    old = tmp_path / "curve"
    shutil.copytree(DEMO_REFERENCE / "smollm2-curve-kl", old)
    shutil.copytree(DEMO_REFERENCE / "angular", old / "angular")  # the angular run it measured for itself
    (old / "notes.txt").write_text("mine")
    assert "files" not in json.loads((old / "manifest.json").read_text())
    before = run_files(old)
    with pytest.raises(RunError, match="older layerprobe whose manifest.json does not list its files"):
        prepare_run_dir(old, overwrite=True, command=CURVE_COMMAND)
    assert run_files(old) == before and not (old / LOCK).exists()
