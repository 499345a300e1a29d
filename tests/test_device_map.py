"""--device-map: a model split by accelerate (here CPU + disk offload, as CI has no GPUs) gives the same numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from .helpers import SPLIT, assert_error
from .helpers import invoke as cli

# Layers 1 and 2 live on disk and are loaded by accelerate's hooks at each forward: a real split with hooks.
COMMON = ["--dataset", "builtin", "--tokens", 512, "--seq-len", 64, "--batch-size", 4]


def invoke(*args):
    result = cli(*args)
    return result, " ".join(result.output.split())


def numbers(path):
    table = pd.read_csv(path)
    return table.select_dtypes("number")


def test_the_split_is_real(model_dirs, tmp_path):
    from layerprobe.models.load import load_model

    loaded = load_model(str(model_dirs["llama"]), device_map=json.dumps(SPLIT), offload=f"disk:{tmp_path}")
    layers = loaded.model.layers  # the base model: the map's 'model.' names and lm_head were fitted to it
    assert loaded.model.hf_device_map["layers.1"] == "disk" and "lm_head" not in loaded.model.hf_device_map
    assert all(p.device.type == "meta" for i in (1, 2) for p in layers[i].parameters())  # weights stay on disk
    assert all(p.device.type == "cpu" for i in (0, 3) for p in layers[i].parameters())
    assert hasattr(layers[1], "_hf_hook") and loaded.device == "cpu"


@pytest.mark.parametrize("command,extra,csv", [("angular", [], "angular.csv"), ("angular", [], "layers.csv"),
                                               ("prune", ["--task", "kl"], "prune.csv")])
def test_split_model_gives_the_same_numbers(command, extra, csv, model_dirs, tmp_path):
    folder = model_dirs["llama"]
    split = tmp_path / "map.json"
    split.write_text(json.dumps(SPLIT))
    plain, _ = invoke(command, folder, *COMMON, *extra, "--device", "cpu", "--out", tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    result, _ = invoke(command, folder, *COMMON, *extra, "--device-map", split, "--offload",
                       f"disk:{tmp_path / 'offload'}", "--out", tmp_path / "split")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(numbers(tmp_path / "split" / csv), numbers(tmp_path / "plain" / csv),
                                  rtol=1e-6, atol=1e-9)


def test_gradnorm_with_a_device_map_and_refusing_offload(model_dirs, tmp_path):
    folder = model_dirs["llama"]
    args = ["gradnorm", folder, "--dataset", "builtin", "--seq-len", 32, "--batch-size", 2]
    plain, _ = invoke(*args, "--out", tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    resident = {k: "cpu" for k in SPLIT}
    result, _ = invoke(*args, "--device-map", json.dumps(resident), "--out", tmp_path / "mapped")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(numbers(tmp_path / "mapped" / "gradnorm.csv"),
                                  numbers(tmp_path / "plain" / "gradnorm.csv"), rtol=1e-6)
    result, text = invoke(*args, "--device-map", json.dumps(SPLIT), "--offload", f"disk:{tmp_path / 'o'}",
                          "--out", tmp_path / "offloaded")
    assert result.exit_code == 2 and "parameters of" in text and "are offloaded" in text, text
    assert not (tmp_path / "offloaded").exists()


@pytest.mark.parametrize("device_map,offload,needle", [
    ('{"model.layers.9": "cpu"}', "none", "'model.layers.9', which is not a module of this model"),
    ("{not json", "none", "is not auto, balanced"),
    ("missing.json", "none", "does not exist"),
    ("auto", "tape", "Unknown --offload 'tape'"),
    ('{"model.embed_tokens": "cpu", "model.layers.0": "disk"}', "disk:{tmp}", "--device-map does not cover"),
])
def test_bad_device_maps(device_map, offload, needle, model_dirs, tmp_path):
    offload = offload.format(tmp=tmp_path / "offload")
    result, text = invoke("angular", model_dirs["llama"], *COMMON, "--device-map", device_map, "--offload", offload,
                          "--out", tmp_path / "x")
    assert_error(result, needle)
    assert not (tmp_path / "x").exists()


def test_spill_off_the_gpus_is_refused_without_offload(model_dirs, tmp_path, monkeypatch):
    import layerprobe.models.load as load

    # What accelerate returns when an auto map over GPUs (max_memory set) runs out: modules left on cpu/disk.
    spilled = {**SPLIT, "model.layers.3": "disk"}
    monkeypatch.setattr(load, "placement_kwargs", lambda device_map, offload: {
        "device_map": spilled, "max_memory": {0: 1}, "offload_folder": str(tmp_path / "o")})
    with pytest.raises(load.ModelLoadError, match=r"does not fit on the 1 visible GPU\(s\) .* pass --offload cpu"):
        load.load_model(str(model_dirs["llama"]), device_map="auto")
