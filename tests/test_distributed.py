"""Data-parallel angular: 2 CPU processes (torchrun, gloo) give the single-process numbers."""

from __future__ import annotations

import json
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


def test_gradnorm_jobs_split_over_two_processes(tmp_path):
    from layerprobe.config import GradnormConfig
    from layerprobe.commands.gradnorm.run import run_gradnorm

    common = ["--arch", "tiny", "--norm", "pre,post", "--seeds", 2, "--batches", 2, "--seq-len", 32,
              "--batch-size", 2, "--dataset", "builtin", "--device", "cpu"]
    result = torchrun(["gradnorm", *common, "--out", tmp_path / "dp"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    single = run_gradnorm(GradnormConfig(arch="tiny", norms=("pre", "post"), seeds=2, batches=2, device="cpu",
                                         data=DataOptions("builtin", tokens=0, seq_len=32, batch_size=2), out=str(tmp_path / "one")))
    for name in ("gradnorm.csv", "variance.csv", "gradnorm_samples.csv"):
        a, b = pd.read_csv(tmp_path / "dp" / name), pd.read_csv(single.folder / name)
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-5, atol=1e-9)  # same rows, same order
    # interrupted in one process after 2 of the 4 jobs, resumed by two: each rank reads its finished job back
    def ctrl_c_in_job_3(stage, done, total):
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_gradnorm(GradnormConfig(arch="tiny", norms=("pre", "post"), seeds=2, batches=2, device="cpu",
                                    data=DataOptions("builtin", tokens=0, seq_len=32, batch_size=2), out=str(tmp_path / "cut")),
                     ctrl_c_in_job_3)
    result = torchrun(["gradnorm", *common, "--out", tmp_path / "cut", "--resume"], tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0 and "2 finished job(s)" in text and "2 run now" in text, text
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "cut" / "gradnorm_samples.csv"),
                                  pd.read_csv(single.folder / "gradnorm_samples.csv"), check_exact=False, rtol=1e-5)
    result = torchrun(["gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", 1, "--dataset", "builtin",
                       "--device", "cpu", "--out", tmp_path / "idle"], tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and text.count("2 processes for 1 model(s)") == 1, text
    assert not (tmp_path / "idle").exists()


def test_prune_under_torchrun_shards_and_merges(model_dirs, tmp_path):
    from layerprobe.config import PruneConfig
    from layerprobe.commands.prune.run import run_prune

    folder = model_dirs["llama"]
    args = ["prune", folder, "--task", "ppl", "--dataset", "builtin", "--tokens", 256, "--seq-len", 32,
            "--batch-size", 4, "--device", "cpu", "--out", tmp_path / "dp"]
    result = torchrun(args, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    single = run_prune(PruneConfig(task="ppl", model=ModelOptions(str(folder), dtype="float32", device="cpu"),
                                   data=DataOptions("builtin", tokens=256, seq_len=32, batch_size=4), out=str(tmp_path / "one")))
    a, b = pd.read_csv(tmp_path / "dp" / "prune.csv"), pd.read_csv(single.folder / "prune.csv")
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-6)  # every layer, one row each, in order
    shards = [json.loads((tmp_path / f"dp-shard-{k}-of-2" / "summary.json").read_text())["shard"] for k in (1, 2)]
    assert [s["variants"] for s in shards] == [["0", "2"], ["1", "3"]]
    assert json.loads((tmp_path / "dp" / "manifest.json").read_text())["shards"] == 2
    result = torchrun([*args[:-1], tmp_path / "one-variant", "--layers", 0], tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and text.count("2 processes for 1 variants") == 1, text
    assert not (tmp_path / "one-variant").exists() and not (tmp_path / "one-variant-shard-1-of-2").exists()


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
