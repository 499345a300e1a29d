"""SIGKILL, not Ctrl-C: a run killed at several moments, then `--resume`, equals an uninterrupted run. The kill
comes from outside (another process), when the run's own files show that the moment has come."""

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

from .test_prune_lmeval import task_dir  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow  # each case starts three processes


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "layerprobe", *map(str, args)]


def run(args) -> None:
    done = subprocess.run(cli(*args), capture_output=True, text=True, env={**os.environ, "CI": "1"})
    assert done.returncode == 0, done.stderr[-2000:]


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


@pytest.mark.parametrize("when", ["early", "late"])
def test_angular_killed_and_resumed(when, model_dirs, corpus_file, tmp_path):
    args = ["angular", model_dirs["llama"], "--dataset", corpus_file, "--tokens", 6000, "--seq-len", 32,
            "--batch-size", 2, "--device", "cpu", "--save-every", 0]
    run([*args, "--out", tmp_path / "whole"])
    at = {"early": 1, "late": 60}[when]  # of 94 batches
    check_killed_then_resumed(args, tmp_path / "cut", tmp_path / "whole", lambda: pass_batches(tmp_path / "cut") >= at,
                              ["angular.csv", "layers.csv"])


@pytest.mark.parametrize("when", ["early", "late"])
def test_taskfree_prune_killed_and_resumed(when, model_dirs, tmp_path):
    args = ["prune", model_dirs["gpt2"], "--task", "ppl", "--dataset", "builtin", "--tokens", 4096, "--seq-len", 32,
            "--batch-size", 2, "--device", "cpu"]
    run([*args, "--out", tmp_path / "whole"])
    at = {"early": 1, "late": 40}[when]  # of 64 batches
    check_killed_then_resumed(args, tmp_path / "cut", tmp_path / "whole", lambda: state_batches(tmp_path / "cut") >= at,
                              ["prune.csv"])


@pytest.mark.parametrize("when", ["baseline", "variants"])
def test_lmeval_prune_killed_and_resumed(when, model_dirs, task_dir, tmp_path):  # noqa: F811
    args = ["prune", model_dirs["llama"], "--task", "tiny_mc", "--include-path", task_dir, "--batch-size", 2,
            "--device", "cpu", "--no-shared-prefix"]
    run([*args, "--out", tmp_path / "whole"])
    cut = tmp_path / "cut"
    moment = {"baseline": lambda: (cut / "state.json").is_file(),  # the baseline is saved, no variant yet
              "variants": lambda: csv_rows(cut / "prune.csv") >= 2}[when]
    check_killed_then_resumed(args, cut, tmp_path / "whole", moment, ["prune.csv"])


@pytest.mark.parametrize("when", [1, 3])
def test_gradnorm_killed_and_resumed(when, tmp_path):
    args = ["gradnorm", "--arch", "tiny", "--norm", "pre,post", "--seeds", 2, "--batches", 2, "--device", "cpu",
            "--dataset", "builtin", "--seq-len", 16, "--batch-size", 2]
    run([*args, "--out", tmp_path / "whole"])
    check_killed_then_resumed(args, tmp_path / "cut", tmp_path / "whole", lambda: finished_jobs(tmp_path / "cut") >= when,
                              ["gradnorm.csv"])
