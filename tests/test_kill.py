"""SIGKILL, not Ctrl-C: a run killed at several moments, then `--resume`, equals an uninterrupted run. The kill
comes from outside (another process), when the run's own files show that the moment has come; the uninterrupted run
and the resume run in this process (the CLI in-process: the same code, without a second interpreter's start-up)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from layerprobe.runs.folder import LOCK

from .helpers import invoke
from .test_prune_lmeval import task_dir  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow  # each case starts a process and kills it


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "layerprobe", *map(str, args)]


def run(args) -> None:
    done = invoke(*args)
    assert done.exit_code == 0, done.output[-2000:]


def kill_when(args, moment, timeout: float = 240.0) -> None:
    """Start the command and SIGKILL it as soon as moment() is true; the moment must come before the run ends."""
    process = subprocess.Popen(cli(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "CI": "1"})
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        if moment():
            process.send_signal(signal.SIGKILL)
            process.wait()
            return
        time.sleep(0.02)
    process.kill()
    raise AssertionError(f"the run ended (or timed out) before the kill moment: {process.stderr.read()[-2000:]!r}")


def pass_batches(folder) -> int:
    """Batches counted in an angular pass checkpoint (0 when none is saved)."""
    path = folder / "pass.safetensors"
    try:
        data = path.read_bytes()
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])["__metadata__"]
        return json.loads(header["counters"])["batches"]
    except (OSError, ValueError, KeyError):
        return 0


def state_batches(folder) -> int:
    try:
        return json.loads((folder / "state.json").read_text())["sums"]["batches"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def csv_rows(path) -> int:
    try:
        return len(pd.read_csv(path))
    except (OSError, ValueError):
        return 0


def finished_jobs(folder) -> int:
    return len(list((folder / "jobs").glob("*-seed*.json"))) if (folder / "jobs").is_dir() else 0


def same_tables(a, b, names) -> None:
    for name in names:
        left, right = pd.read_csv(a / name), pd.read_csv(b / name)
        pd.testing.assert_frame_equal(left, right, check_exact=False, rtol=1e-12, atol=1e-12)


def check_killed_then_resumed(args, out, whole, moment, tables) -> None:
    kill_when([*args, "--out", out], moment)
    assert (out / LOCK).exists() and not (out / "summary.json").exists()  # visibly unfinished
    run([*args, "--out", out, "--resume"])
    assert (out / "summary.json").is_file() and not (out / LOCK).exists()
    same_tables(whole, out, tables)


def whole_runs(tmp_path_factory, cases: dict) -> dict:
    """The uninterrupted run of each command, once for all the moments it is killed at."""
    root = tmp_path_factory.mktemp("whole")
    folders = {}
    for name, args in cases.items():
        run([*args, "--out", root / name])
        folders[name] = root / name
    return folders


@pytest.fixture(scope="module")
def commands(model_dirs, corpus_file, task_dir):  # noqa: F811
    return {
        "angular": ["angular", model_dirs["llama"], "--dataset", corpus_file, "--tokens", 4000, "--seq-len", 32,
                    "--batch-size", 2, "--device", "cpu", "--save-every", 0],  # 63 batches, saved after each
        "taskfree": ["prune", model_dirs["gpt2"], "--task", "ppl", "--dataset", "builtin", "--tokens", 2048,
                     "--seq-len", 32, "--batch-size", 2, "--device", "cpu"],  # 32 batches
        # lm-eval: the kill after the saved baseline is test_prune_lmeval's (in process); here, among the variants
        "lmeval": ["prune", model_dirs["llama"], "--task", "tiny_mc", "--include-path", task_dir, "--batch-size", 2,
                   "--device", "cpu", "--no-shared-prefix"],
        "gradnorm": ["gradnorm", "--arch", "tiny", "--norm", "pre,post", "--seeds", 2, "--batches", 2, "--device",
                     "cpu", "--dataset", "builtin", "--seq-len", 16, "--batch-size", 2],
    }


@pytest.fixture(scope="module")
def whole(commands, tmp_path_factory):
    return whole_runs(tmp_path_factory, commands)


MOMENTS = [  # (command, what the run's files show when it is killed, tables compared): each command once, early
    # (after its first save) or late (well into the run)
    ("angular", lambda cut: pass_batches(cut) >= 40, ["angular.csv", "layers.csv"]),
    ("taskfree", lambda cut: state_batches(cut) >= 1, ["prune.csv"]),
    ("lmeval", lambda cut: csv_rows(cut / "prune.csv") >= 2, ["prune.csv"]),
    ("gradnorm", lambda cut: finished_jobs(cut) >= 1, ["gradnorm.csv"]),
]


@pytest.mark.parametrize("case", range(len(MOMENTS)), ids=["angular-late", "taskfree-early", "lmeval-variants",
                                                           "gradnorm-1-job"])
def test_killed_and_resumed_equals_uninterrupted(case, commands, whole, tmp_path):
    name, moment, tables = MOMENTS[case]
    cut = tmp_path / "cut"
    check_killed_then_resumed(commands[name], cut, whole[name], lambda: moment(cut), tables)
