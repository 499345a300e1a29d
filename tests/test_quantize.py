"""Quantized weights (issue 19): --quantize needs CUDA and bitsandbytes, a checkpoint saved quantized needs its
method's packages; each gap is one line naming it. The 4-bit path itself runs only where a GPU is (test_gpu)."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from layerprobe.models.quantize import saved_quantization

from .helpers import assert_error, invoke

DATA = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2"]


def saved_as(model_dirs, tmp_path, quantization: dict):
    """The tiny LLaMA with a quantization_config in config.json, as a quantized checkpoint carries."""
    folder = tmp_path / "quantized"
    shutil.copytree(model_dirs["llama"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"quantization_config": quantization}))
    return folder


def test_quantize_on_cpu_is_one_line(model_dirs, tmp_path):
    for command in (["angular"], ["prune", "--task", "kl"]):
        result = invoke(*command, str(model_dirs["llama"]), "--quantize", "4bit", "--device", "cpu",
                        *DATA, "--out", str(tmp_path / command[0]))
        assert_error(result, "--quantize 4bit needs a CUDA GPU")
    result = invoke("angular", str(model_dirs["llama"]), "--quantize", "3bit", "--device", "cpu", *DATA,
                    "--out", str(tmp_path / "three"))
    assert_error(result, "Unknown --quantize '3bit': use 4bit, 8bit")


@pytest.mark.skipif(all(importlib.util.find_spec(n) for n in ("optimum", "gptqmodel")), reason="GPTQ installed")
def test_saved_gptq_without_its_packages_names_them(model_dirs, tmp_path):
    folder = saved_as(model_dirs, tmp_path, {"quant_method": "gptq", "bits": 4, "group_size": 128})
    result = invoke("angular", str(folder), "--device", "cpu", *DATA, "--out", str(tmp_path / "a"))
    assert_error(result, "is saved quantized (gptq, 4-bit) and loading it needs")
    assert "pip install" in result.output and "gptqmodel" in result.output


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes installed")
def test_saved_bitsandbytes_without_the_package_and_quantize_twice(model_dirs, tmp_path):
    folder = saved_as(model_dirs, tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    result = invoke("prune", str(folder), "--task", "kl", "--device", "cpu", *DATA,
                    "--out", str(tmp_path / "p"))
    assert_error(result, "needs bitsandbytes: pip install bitsandbytes")
    result = invoke("angular", str(folder), "--quantize", "8bit", "--device", "cpu", *DATA,
                    "--out", str(tmp_path / "q"))
    assert_error(result, "is already quantized (bitsandbytes): drop --quantize")


def test_what_a_saved_quantization_config_says():
    class Config:  # the two shapes transformers leaves: a dict, or an object with to_dict()
        quantization_config = {"quant_method": "awq", "bits": 4, "version": "gemm"}

    assert saved_quantization(Config()) == {"method": "awq", "bits": 4, "on_load": False}
    Config.quantization_config = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    assert saved_quantization(Config()) == {"method": "bitsandbytes", "bits": 8, "on_load": False}
    Config.quantization_config = None
    assert saved_quantization(Config()) is None
