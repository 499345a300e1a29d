"""Data-parallel angular: 2 CPU processes (torchrun, gloo) give the single-process numbers."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from layerprobe.commands.angular.run import run_angular
from layerprobe.config import AngularConfig, DataOptions, ModelOptions

pytestmark = pytest.mark.slow  # torchrun start-up: seconds per test


def torchrun(args, tmp_path, procs=2):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "LAYERPROBE_BACKEND": "gloo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
           "-m", "layerprobe", *map(str, args)]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


# "last": the same split and gather of batches over fewer positions (extended tier)
@pytest.mark.parametrize("positions", ["all", pytest.param("last", marks=pytest.mark.extended)])
def test_two_processes_equal_one(positions, model_dirs, corpus_file, tmp_path):
    folder = model_dirs["llama"]
    # 7 batches of 3 x 48: rank 0 gets 4, rank 1 gets 3 (and the last, shorter one); 2048 > all positions
    args = ["angular", folder, "--dataset", corpus_file, "--tokens", 1000, "--seq-len", 48, "--batch-size", 3,
            "--device", "cpu", "--positions", positions, "--out", tmp_path / "dp"]
    result = torchrun(args, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    single = run_angular(AngularConfig(model=ModelOptions(str(folder), dtype="float32", device="cpu"),
                                       data=DataOptions(str(corpus_file), tokens=1000, seq_len=48, batch_size=3), positions=positions,
                                       out=str(tmp_path / "one")))
    for name in ("angular.csv", "layers.csv"):
        a, b = pd.read_csv(tmp_path / "dp" / name), pd.read_csv(single.folder / name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b)
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9, atol=1e-9)
    summary = pd.read_json(tmp_path / "dp" / "summary.json", typ="series")
    assert summary["processes"] == 2 and summary["tokens"] == single.summary["tokens"]
    assert not any(p.name.startswith("dp-") for p in tmp_path.iterdir())  # one folder, written by rank 0 only


@pytest.mark.extended  # twins: test_launcher_with_one_process_sets_up_the_group (the group and its collectives
# with one process, in-process) and test_two_processes_equal_one (angular under torchrun equals a plain run)
def test_one_launched_process_runs_the_collectives(model_dirs, corpus_file, tmp_path):
    """torchrun with one process sets up the process group (gloo here, NCCL on a GPU) and equals a plain run."""
    folder = model_dirs["llama"]
    args = ["angular", folder, "--dataset", corpus_file, "--tokens", 500, "--seq-len", 48, "--batch-size", 3,
            "--device", "cpu", "--out", tmp_path / "one-proc"]
    result = torchrun(args, tmp_path, procs=1)
    assert result.returncode == 0, result.stdout + result.stderr
    single = run_angular(AngularConfig(model=ModelOptions(str(folder), dtype="float32", device="cpu"),
                                       data=DataOptions(str(corpus_file), tokens=500, seq_len=48, batch_size=3), out=str(tmp_path / "plain")))
    launched = pd.read_csv(tmp_path / "one-proc" / "angular.csv")
    pd.testing.assert_frame_equal(launched, pd.read_csv(single.folder / "angular.csv"), check_exact=False, rtol=1e-12)


def test_distributed_error_is_said_once_and_all_ranks_fail(tmp_path):
    result = torchrun(["angular", tmp_path / "missing-model", "--dataset", "builtin", "--device", "cpu"], tmp_path)
    assert result.returncode != 0
    assert (result.stdout + result.stderr).count("does not exist") == 1


def test_more_processes_than_batches_is_refused(model_dirs, tmp_path):
    args = ["angular", model_dirs["llama"], "--dataset", "builtin", "--tokens", 96, "--seq-len", 48, "--batch-size", 2,
            "--device", "cpu", "--out", tmp_path / "dp"]  # one batch for two processes
    result = torchrun(args, tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    needle = "2 processes for 1 batch(es) of 2 x 48 tokens: some would idle; ask for at least 192 --tokens"
    assert result.returncode != 0 and text.count(needle) == 1, text
    assert "layerprobe/angular.py" not in text and not (tmp_path / "dp").exists()  # torchrun's own report only


def test_launcher_with_one_process_sets_up_the_group(monkeypatch):
    import socket

    import torch
    import torch.distributed as dist

    from layerprobe.distributed import current_world

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "LAYERPROBE_BACKEND": "gloo"}.items():
        monkeypatch.setenv(key, value)
    try:
        world = current_world()
        assert world.group and dist.is_initialized() and (world.rank, world.size) == (0, 1)
        assert world.sum(torch.tensor([2.0], dtype=torch.float64)).item() == 2.0 and world.gather("x") == ["x"]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    monkeypatch.delenv("WORLD_SIZE")
    assert not current_world().group  # no launcher: no group
