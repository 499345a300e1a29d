"""On a CUDA GPU: angular and prune give the CPU's numbers (float32), and torchrun with one process (NCCL) gives the
single-process numbers. Skipped where no GPU is visible (CI never has one); run on a GPU box with
`python -m pytest tests/test_gpu.py`."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from layerprobe.commands.angular.run import run_angular
from layerprobe.config import AngularConfig, DataOptions, ModelOptions, PruneConfig
from layerprobe.commands.prune.run import run_prune

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")

TOKENS, SEQ, BATCH = 4096, 64, 4


def angular_on(device, folder, corpus, out, dtype="float32"):
    return run_angular(AngularConfig(model=ModelOptions(str(folder), dtype=dtype, device=device),
                                     data=DataOptions(str(corpus), tokens=TOKENS, seq_len=SEQ, batch_size=BATCH), out=str(out)))


@pytest.mark.parametrize("arch", ["llama", "gpt2", "bert"])
def test_angular_cuda_equals_cpu(arch, model_dirs, corpus_file, tmp_path):
    cpu = angular_on("cpu", model_dirs[arch], corpus_file, tmp_path / "cpu")
    gpu = angular_on("cuda", model_dirs[arch], corpus_file, tmp_path / "gpu")
    assert gpu.summary["device"].startswith("cuda") and gpu.summary["tokens"] == cpu.summary["tokens"]
    np.testing.assert_allclose(gpu.angular["distance"], cpu.angular["distance"], rtol=0, atol=1e-4)
    for column in ("norm", "variance", "cos_input"):
        np.testing.assert_allclose(gpu.layers[column], cpu.layers[column], rtol=1e-4, atol=1e-5)
    assert gpu.summary["peak_gpu_memory_gib"] > 0


@pytest.mark.parametrize("task", ["ppl", "kl"])
def test_prune_cuda_equals_cpu(task, model_dirs, corpus_file, tmp_path):
    def run(device):
        return run_prune(PruneConfig(task=task, model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device=device),
                                     data=DataOptions(str(corpus_file), tokens=TOKENS, seq_len=SEQ, batch_size=BATCH),
                                     out=str(tmp_path / device)))

    cpu, gpu = run("cpu"), run("cuda")
    assert list(gpu.table["removed"]) == list(cpu.table["removed"])
    scale = max(1.0, float(cpu.table["baseline"].abs().max()))  # ppl: relative; kl: absolute
    np.testing.assert_allclose(gpu.table["baseline"], cpu.table["baseline"], rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(gpu.table["delta"], cpu.table["delta"], rtol=0, atol=1e-4 * scale)


def test_torchrun_one_process_nccl_equals_single(model_dirs, corpus_file, tmp_path):
    folder = model_dirs["llama"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("LAYERPROBE_BACKEND", None)  # NCCL on a GPU
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "layerprobe",
           "angular", str(folder), "--dataset", str(corpus_file), "--tokens", str(TOKENS), "--seq-len", str(SEQ),
           "--batch-size", str(BATCH), "--device", "cuda", "--dtype", "float32", "--out", str(tmp_path / "nccl")]
    result = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    single = angular_on("cuda", folder, corpus_file, tmp_path / "one")
    launched = pd.read_csv(tmp_path / "nccl" / "angular.csv")
    np.testing.assert_allclose(launched["distance"], single.angular["distance"], rtol=0, atol=1e-9)
    summary = pd.read_json(tmp_path / "nccl" / "summary.json", typ="series")
    assert summary["processes"] == 1 and summary["device"].startswith("cuda")


@pytest.mark.skipif(not torch.cuda.is_available() or __import__("importlib").util.find_spec("bitsandbytes") is None,
                    reason="4-bit needs a CUDA GPU and bitsandbytes")
def test_quantize_4bit_angular_and_prune(model_dirs, corpus_file, tmp_path):
    """--quantize 4bit: the blocks hold 4-bit weights (no full-precision copy), the manifest says so, the distances
    stay near float32's, and the shared-prefix prune equals the plain per-variant one on the quantized model."""
    from layerprobe.models.load import load_model

    loaded = load_model(str(model_dirs["llama"]), head="causal-lm", device="cuda", quantize="4bit")
    weight = loaded.model.model.layers[0].self_attn.q_proj.weight
    assert type(weight).__name__ == "Params4bit" and weight.dtype == torch.uint8
    assert loaded.quantization == {"method": "bitsandbytes", "bits": 4, "on_load": True}
    del loaded
    full = angular_on("cuda", model_dirs["llama"], corpus_file, tmp_path / "full")
    quantized = run_angular(AngularConfig(model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cuda",
                                                             quantize="4bit"),
                                          data=DataOptions(str(corpus_file), tokens=TOKENS, seq_len=SEQ, batch_size=BATCH),
                                          out=str(tmp_path / "q")))
    assert quantized.summary["quantization"]["bits"] == 4
    np.testing.assert_allclose(quantized.angular["distance"], full.angular["distance"], atol=0.05)
    runs = []
    for shared in (True, False):
        runs.append(run_prune(PruneConfig(task="kl", model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cuda",
                                                                         quantize="4bit"),
                                          data=DataOptions(str(corpus_file), tokens=1024, seq_len=SEQ, batch_size=BATCH),
                                          shared_prefix=shared, out=str(tmp_path / f"p{shared}"))))
    np.testing.assert_allclose(runs[0].prune["pruned"], runs[1].prune["pruned"], rtol=1e-3, atol=1e-6)
