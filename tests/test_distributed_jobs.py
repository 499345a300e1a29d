"""Work split over 2 CPU processes (torchrun, gloo) by job and by variant: gradnorm's (norm, seed) jobs and prune's
variants give the single-process tables, resume per rank, and refuse more processes than units of work. (Apart from
test_distributed.py's data-parallel angular: two files of torchrun launches that -n 2 can run side by side.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from layerprobe.config import DataOptions, ModelOptions

from .test_distributed import torchrun

pytestmark = pytest.mark.slow  # torchrun start-up: seconds per test


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
