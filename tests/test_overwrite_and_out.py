"""What --overwrite replaces and where --out may be (issue 47, rule 2): --overwrite removes every file the replaced run
listed (its manifest's "files"), and only those, before the new run writes, for every run-writing command; no
command's --out is one of its inputs or inside one (merge, export, heal, report), a symbolic link in the way
included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import DEMO_REFERENCE, assert_error, invoke
from tests.every_command import RUNS, TINY

RUN_WRITERS = ("angular", "prune", "curve", "heal", "gradnorm", "toy")


def files_of(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def listed(folder: Path) -> set[str]:
    return set(json.loads((folder / "manifest.json").read_text())["files"])


def run(command: str, model_dirs, out: Path, *extra):
    args = [str(a).replace("{model}", str(model_dirs["llama"])) for a in RUNS[command]]
    if "lstsq" in extra:  # trains nothing: --steps is refused there
        at = args.index("--steps")
        del args[at:at + 2]
    result = invoke(*args, "--out", out, *extra)
    assert result.exit_code in (0, 1), result.output
    return result


@pytest.mark.slow  # one tiny run of each command, twice
@pytest.mark.parametrize("command", RUN_WRITERS)
def test_overwrite_removes_every_listed_file_and_only_those(command, model_dirs, tmp_path):
    """The replaced run listed a file the new one does not write (planted in its manifest, as another method's
    adapter/ or transform.safetensors would be): it is gone after --overwrite, and the new manifest lists exactly
    what is there; a listed name outside the folder ('../keep.txt') is never touched."""
    out = tmp_path / "run"
    run(command, model_dirs, out)
    (out / "older" / "adapter").mkdir(parents=True)
    (out / "older" / "adapter" / "weights.bin").write_bytes(b"old")
    (tmp_path / "keep.txt").write_text("mine")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] += ["older/adapter/weights.bin", "../keep.txt"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    run(command, model_dirs, out, "--overwrite")
    assert not (out / "older").exists()
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert files_of(out) <= listed(out) and "older/adapter/weights.bin" not in listed(out)


@pytest.mark.slow  # two heals of one tiny model
def test_overwrite_of_a_heal_run_by_another_method_leaves_nothing_of_it(model_dirs, tmp_path):
    out = tmp_path / "heal"
    run("heal", model_dirs, out)  # lora: adapter/
    assert (out / "adapter").is_dir()
    run("heal", model_dirs, out, "--overwrite", "--method", "lstsq")
    assert not (out / "adapter").exists() and (out / "transform.safetensors").is_file()
    assert files_of(out) <= listed(out) and not any(name.startswith("adapter/") for name in listed(out))
    run("heal", model_dirs, out, "--overwrite")  # and back: the maps go
    assert not (out / "transform.safetensors").exists() and not (out / "replace.csv").exists()
    assert files_of(out) <= listed(out) and "transform.safetensors" not in listed(out)


def everything(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, hidden ones included, with its bytes: a run left as it was compares equal."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def unwritable(folder: Path) -> bool:
    """Make `folder` a place no file can be removed from, as a read-only mount or an immutable folder is (as root,
    chmod does not stop removal: chattr +i does); False where this machine allows neither."""
    import os
    import subprocess

    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return True
    folder.chmod(0o755)
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def writable(folder: Path) -> None:
    import subprocess

    subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


@pytest.mark.slow  # one tiny curve run
def test_a_refused_overwrite_leaves_the_old_run_as_it_was(model_dirs, tmp_path):
    """A curve run whose angular/ cannot be emptied (replay D_ro3): --overwrite is refused before anything is claimed
    or removed, naming the file, and the folder is byte for byte what it was: no lock that would make report and
    compare call the finished run unfinished, no file of it gone."""
    out = tmp_path / "curve"
    args = [str(a).replace("{model}", str(model_dirs["llama"])).replace("last", "angular") for a in RUNS["curve"]]
    assert invoke(*args, "--out", out).exit_code == 0  # measures its angular/ run inside it
    before = everything(out)
    if not unwritable(out / "angular"):
        pytest.skip("this machine can make no folder unwritable to the test's user")
    try:
        result = invoke(*args, "--out", out, "--overwrite")
    finally:
        writable(out / "angular")
    assert_error(result, "cannot be removed")
    assert "angular/" in result.output
    assert everything(out) == before
    assert invoke("report", out, "--out", tmp_path / "page").exit_code == 0  # still a finished run


def test_overwrite_removes_layerprobes_leftovers_and_refuses_a_partial_it_did_not_mark(tmp_path):
    """One rule for layerprobe's own leftovers in a replaced run (replay D_part): a '.x.partial-*' folder with the
    mark files.publishing writes beside it, and a '.x.*.tmp' file, go with the run --overwrite replaces, as a resume
    removes them; a '.partial-' folder without the mark is not layerprobe's, so --overwrite refuses it by name (as it
    refuses any file the old run did not list) and leaves it, never keeping it unlisted in the new run."""
    out = tmp_path / "toy"
    toy = ["toy", "--depth", "3", "--width", "8", "--samples", "16", "--out", out]
    assert invoke(*toy).exit_code == 0
    ours = out / ".toy.csv.partial-ab12cd34"
    ours.mkdir()
    (ours / "toy.csv").write_text("half")
    ours.with_name(ours.name + ".layerprobe").write_text("layerprobe\n")
    (out / ".summary.json.x1y2.tmp").write_text("{")
    result = invoke(*toy, "--overwrite")
    assert result.exit_code == 0, result.output
    assert not ours.exists() and not ours.with_name(ours.name + ".layerprobe").exists()
    assert not (out / ".summary.json.x1y2.tmp").exists()
    assert files_of(out) <= listed(out)

    planted = out / ".merged.partial-999"
    planted.mkdir()
    (planted / "model.safetensors").write_text("x")
    before = everything(out)
    assert_error(invoke(*toy, "--overwrite"), ".merged.partial-999")
    assert everything(out) == before


@pytest.mark.parametrize("first, second", [("prune", "curve"), ("curve", "prune")])
@pytest.mark.slow  # a tiny prune run each
def test_a_sweep_and_a_curve_never_overwrite_each_other(first, second, model_dirs, tmp_path):
    """A plain sweep's folder given to a curve run with --overwrite, and the reverse (replay O_pr2cv, O_cv2pr): two
    kinds of run, so it is refused naming both, and the folder keeps every file of the run in it."""
    out = tmp_path / "run"
    run(first, model_dirs, out)
    before = everything(out)
    args = [str(a).replace("{model}", str(model_dirs["llama"])) for a in RUNS[second]]
    kinds = {"prune": "a prune run", "curve": "a curve run"}
    assert_error(invoke(*args, "--out", out, "--overwrite"), f"holds {kinds[first]}, not {kinds[second]}")
    assert everything(out) == before


@pytest.fixture(scope="module")
def shards(model_dirs, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("shards")
    for k in (1, 2):
        run("prune", model_dirs, root / f"shard-{k}", "--shard", f"{k}/2")
    return [root / "shard-1", root / "shard-2"]


@pytest.mark.parametrize("where", ["is", "inside"])
def test_merge_out_is_none_of_its_shards(shards, where):
    folders = shards
    out = folders[0] if where == "is" else folders[1] / "merged"
    before = {f: files_of(f) for f in folders}
    result = invoke("merge", *folders, "--out", out, "--overwrite")
    assert_error(result, "never writes where it reads")
    assert {f: files_of(f) for f in folders} == before


def test_heal_out_is_not_inside_its_model(model_dirs, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(model_dirs["llama"], model)
    before = files_of(model)
    assert_error(invoke("heal", model, "--remove", "1", "--out", model / "healed", *TINY), "never writes where it reads")
    assert files_of(model) == before


def test_report_out_may_be_a_run_it_reads_but_not_inside_one(tmp_path):
    runs = tmp_path / "angular"
    shutil.copytree(DEMO_REFERENCE / "angular", runs)
    assert_error(invoke("report", runs, "--out", runs / "pages"), "is inside")
    assert not (runs / "pages").exists()
    assert invoke("report", runs, "--out", runs).exit_code == 0


@pytest.mark.slow  # a heal and exports of a tiny model
def test_export_never_lands_in_a_run_or_through_a_link_in_its_source(model_dirs, tmp_path):
    heal = tmp_path / "heal"
    run("heal", model_dirs, heal, "--method", "lstsq")
    before = files_of(heal)
    result = invoke("export", model_dirs["llama"], "--remove", "2", "--out", heal / "merged", "--overwrite",
                    "--device", "cpu")
    assert_error(result, "inside the layerprobe run folder")
    assert files_of(heal) == before
    source = tmp_path / "source"
    shutil.copytree(model_dirs["llama"], source)
    (tmp_path / "link").symlink_to(source)
    result = invoke("export", source, "--remove", "1", "--out", tmp_path / "link" / "short", "--device", "cpu")
    assert_error(result, "inside it")
    assert not (source / "short").exists()


INPUT_READERS = {  # command -> (its arguments, the --out inside one of its inputs): {model} a copy of the tiny
    # LLaMA, {run} a copy of the demo's angular run (read by prune --angular, compare and report)
    "angular": (["angular", "{model}", *TINY], "{model}/run"),
    "prune": (["prune", "{model}", "--task", "kl", *TINY], "{model}"),
    "curve": (["prune", "{model}", "--task", "kl", "--curve", "--strategies", "angular", "--angular", "{run}",
               "--max-removed", "1", *TINY], "{run}/curve"),
    "heal": (["heal", "{model}", "--remove", "1", "--method", "lstsq", *TINY], "{model}/healed"),
    "export": (["export", "{model}", "--remove", "1"], "{model}/short"),
    "compare": (["compare", "{run}", "{run}"], "{run}/summary.json"),
    "merge": (["merge", "{run}", "{run}"], "{run}/merged"),
    "report": (["report", "{run}"], "{run}/pages"),
}


@pytest.mark.parametrize("command", list(INPUT_READERS))
def test_no_command_writes_inside_what_it_reads(command, model_dirs, tmp_path):
    """Issue 47 rule 2 for every command that reads a model or a run: its --out inside one of them (a run in the
    model folder, a verdict over a run's summary.json) is one line before anything is read or written, with
    --overwrite too, and every input stays byte for byte."""
    model, run = tmp_path / "model", tmp_path / "angular"
    shutil.copytree(model_dirs["llama"], model)
    shutil.copytree(DEMO_REFERENCE / "angular", run)
    before = {p: p.read_bytes() for root in (model, run) for p in root.rglob("*") if p.is_file()}
    args, out = INPUT_READERS[command]
    fill = {"{model}": str(model), "{run}": str(run)}
    for word, path in fill.items():
        args, out = [a.replace(word, path) for a in args], out.replace(word, path)
    result = invoke(*args, "--out", out, "--overwrite")
    assert_error(result, "a command never writes where it reads")
    assert {p: p.read_bytes() for root in (model, run) for p in root.rglob("*") if p.is_file()} == before
