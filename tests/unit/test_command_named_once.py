"""A command's name is written once, in its record (issue 52): the functions that prepare, check and write a run
folder and resolve its settings take the record (commands.Command), and write_run puts its name in summary.json
and manifest.json. The scan (named_in) is tried here on a snippet; tests/test_source_scans.py runs it over the
package's source (a parse of all of it, ~1 s: the default tier), so a name typed again at a call fails there."""

from __future__ import annotations

import ast

# function -> the position of its `command` argument (the record)
TAKE_THE_RECORD = {"write_run": 1, "prepare_run_dir": 3, "resolve_settings": 0, "check_resume": 1, "check_owned": 1,
                   "resume_state": 1}


def named_again(source: str, where: str) -> list[str]:
    """'file:line what' for each call of TAKE_THE_RECORD given a str literal as an argument (positional or
    `command=`), and each dict literal whose "command" is a str literal (write_run fills it from the record)."""
    return named_in(ast.walk(ast.parse(source)), where)


def named_in(nodes, where: str) -> list[str]:
    """named_again over the nodes of a syntax tree already walked."""
    found = []
    for node in nodes:
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (isinstance(key, ast.Constant) and key.value == "command" and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)):
                    found.append(f"{where}:{node.lineno} {{'command': {value.value!r}}}")
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in TAKE_THE_RECORD:
                continue
            given = [k.value for k in node.keywords if k.arg == "command"]
            given += node.args[TAKE_THE_RECORD[name]:TAKE_THE_RECORD[name] + 1]
            literal = next((a.value for a in given if isinstance(a, ast.Constant) and isinstance(a.value, str)), None)
            if literal is not None:
                found.append(f"{where}:{node.lineno} {name}(... {literal!r} ...)")
    return found


def test_the_scan_finds_a_name_typed_again():
    """The scan itself: each way a name can be typed again is found, a record passed is not."""
    source = ('write_run(folder, "toy", tables={})\nprepare_run_dir(out, False, command="curve")\n'
              'check_owned(Path(out), "prune", "--overwrite")\nsummary = {"command": "angular", **facts}\n'
              'resolve_settings(COMMAND, given)\nwrite_run(folder, COMMAND, tables={})\n')
    assert [line.split(" ", 1)[1] for line in named_again(source, "x.py")] == [
        "write_run(... 'toy' ...)", "prepare_run_dir(... 'curve' ...)", "check_owned(... 'prune' ...)",
        "{'command': 'angular'}"]


def test_write_run_names_the_command_from_its_record(tmp_path):
    """summary.json and manifest.json say the record's name, "command" first, though the run's summary left it
    out; a summary naming another command is refused before anything is written."""
    import json

    import pandas as pd
    import pytest

    from layerprobe.commands.toy import COMMAND
    from layerprobe.config import ToyConfig
    from layerprobe.errors import RunError
    from layerprobe.runs.folder import prepare_run_dir
    from layerprobe.runs.write import write_run

    folder = prepare_run_dir(tmp_path / "toy", command=COMMAND)
    summary = {"model": "toy", "num_layers": 1, "width": 2, "samples": 3, "alphas": [1.0], "seed": 0, "fits": {},
               "expected_pre_ln": {}, "seconds": 0.0, "warnings": []}
    with pytest.raises(RunError, match="names the command 'curve'"):
        write_run(folder, COMMAND, tables={}, figures={}, summary={"command": "curve", **summary},
                  config=ToyConfig(), started="now", seconds=0.0, facts={})
    assert not (folder / "summary.json").exists()
    write_run(folder, COMMAND, tables={"toy": pd.DataFrame(columns=["norm"])}, figures={}, summary=summary,
              config=ToyConfig(), started="now", seconds=0.0, facts={})
    written = json.loads((folder / "summary.json").read_text())
    assert next(iter(written)) == "command" and written["command"] == "toy"
    assert json.loads((folder / "manifest.json").read_text())["command"] == "toy"
