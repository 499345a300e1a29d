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
