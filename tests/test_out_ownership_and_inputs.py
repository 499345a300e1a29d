"""Who owns --out and which inputs are trusted, one test per rule (docs/errors.md): nothing layerprobe did not make
is deleted (the source, its parents, the working directory, foreign folders); one writer per --out; inputs read
from disk are checked; conflicting, huge or meaningless options are refused; messages name the real cause."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEMO_REFERENCE, assert_error, invoke





def export(model, out, *extra):
    return invoke("export", str(model), "--remove", "1", "--out", str(out), "--device", "cpu",
                  "--dtype", "float32", *map(str, extra))


def listing(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")}


@pytest.fixture
def source(model_dirs, tmp_path):
    """A copy of a tiny model inside a parent folder that also holds an unrelated file."""
    import shutil

    parent = tmp_path / "parent"
    shutil.copytree(model_dirs["llama"], parent / "model")
    (parent / "notes.txt").write_text("mine")
    return parent / "model"


@pytest.mark.parametrize("where", ["source", "parent", "dotdot", "cwd"])
def test_overwrite_never_replaces_the_source_its_parents_or_the_working_directory(source, where, monkeypatch):
    parent = source.parent
    monkeypatch.chdir(parent)
    out = {"source": source, "parent": parent, "dotdot": source / "inner" / ".." , "cwd": Path(".")}[where]
    before = listing(parent)
    result = export(source, out, "--overwrite")
    assert_error(result, "--out")
    assert "source" in result.output or "working directory" in result.output
    assert listing(parent) == before


def test_overwrite_replaces_only_an_earlier_export(source, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.bin").write_bytes(b"x" * 10)
    assert_error(export(source, foreign, "--overwrite"), "layerprobe did not write")
    assert listing(foreign) == {"data.bin": 10}
    done = tmp_path / "done"
    assert export(source, done).exit_code == 0
    first = json.loads((done / "layerprobe-removal.json").read_text())
    assert export(source, done, "--overwrite").exit_code == 0
    assert json.loads((done / "layerprobe-removal.json").read_text())["removed"] == first["removed"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".done")]  # no partial, old or lock left


def test_symlinked_out_is_refused_by_name(source, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert_error(export(source, tmp_path / "link"), "is a symbolic link")


@pytest.mark.parametrize("offset", [0.0, 1.5])
def test_two_exports_into_one_out_never_mix(source, tmp_path, offset):
    """Two processes export different removals into one --out, the second started `offset` seconds later: one
    wins whole, the other is refused; the folder holds one export's config and weights, never a mix."""
    import time

    out = tmp_path / "shared"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    commands = [[sys.executable, "-m", "layerprobe", "export", str(source), "--remove", remove, "--out", str(out),
                 "--device", "cpu", "--dtype", "float32", "--no-verify"] for remove in ("0", "2-3")]
    runs = []
    for command in commands:
        runs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        time.sleep(offset)
    codes = [r.wait(timeout=300) for r in runs]
    outputs = [r.stdout.read().decode() for r in runs]
    assert 0 in codes, outputs
    for code, text in zip(codes, outputs):
        assert code in (0, 2), text
        assert "Traceback" not in text
        if code == 2:
            assert "being written by another layerprobe process" in text or "exists and is not empty" in text, text
    removal = json.loads((out / "layerprobe-removal.json").read_text())
    config = json.loads((out / "config.json").read_text())
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        blocks = {int(k.split(".")[2]) for k in weights.keys() if k.startswith("model.layers.")}
    assert config["num_hidden_layers"] == len(blocks) == 4 - len(removal["removed"])


@pytest.mark.parametrize("args,needle", [
    (["export", "{model}", "--remove", "0-300000000", "--out", "{tmp}/x"], "--remove 0-300000000 out of range"),
    (["prune", "{model}", "--task", "kl", "--layers", "0-300000000", "--dataset", "builtin", "--out", "{tmp}/y"],
     "--layers 0-300000000 out of range"),
    (["export", "--from-curve", "{tmp}", "--remove", "1", "--out", "{tmp}/z"], "--from-curve chooses the layers"),
    (["export", "--from-curve", "{tmp}", "--part", "attn", "--out", "{tmp}/z"], "--from-curve chooses the layers"),
    (["gradnorm", "--arch", "tiny", "--norm", "pre,pre", "--dataset", "builtin"], "--norm lists 'pre' twice"),
    (["toy", "--norm", "post,post"], "--norm lists 'post' twice"),
])
def test_meaningless_or_huge_options_are_one_line(args, needle, model_dirs, tmp_path):
    filled = [a.format(model=model_dirs["llama"], tmp=tmp_path) for a in args]
    assert_error(invoke(*[*filled, "--device", "cpu"] if args[0] in ("export", "prune") else filled), needle)


def test_a_config_with_fewer_layers_than_its_weights_is_refused(source):
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    result = invoke("angular", str(source), "--dataset", "builtin", "--tokens", "64", "--seq-len", "32",
                    "--device", "cpu", "--out", str(source.parent / "run"))
    assert_error(result, "holds weights of block 2 of model.layers, but its config.json says 2 blocks")


@pytest.mark.parametrize("kind", ["gpt2-untied", "bert-classifier"])
def test_export_keeps_the_class_and_every_head(kind, tokenizer, tmp_path):
    """The export is the model the user loaded, less the removed blocks: its own class, an untied LM head, a
    classifier; its outputs equal an independently shortened copy's, and its config.json equals the source's but
    for the fields the removal changes."""
    import torch
    import transformers

    from tests.helpers import independent_pruned

    torch.manual_seed(0)
    if kind == "gpt2-untied":
        config = transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=4, n_head=4, n_positions=64,
                                         tie_word_embeddings=False)
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=4, num_attention_heads=4, num_labels=3)
        cls = transformers.BertForSequenceClassification
    source = tmp_path / "source"
    cls(config).save_pretrained(source)
    tokenizer.save_pretrained(source)
    out = tmp_path / "out"
    result = invoke("export", str(source), "--remove", "1", "--out", str(out), "--device", "cpu",
                    "--dtype", "float32")
    assert result.exit_code == 0, result.output
    exported = cls.from_pretrained(out).eval()
    reference = independent_pruned(source, cls, [1])
    ids = torch.randint(0, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = exported(input_ids=ids).logits, reference(input_ids=ids).logits
    assert got.shape == want.shape and float((got - want).abs().max()) < 1e-5
    before, after = (json.loads((f / "config.json").read_text()) for f in (source, out))
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed <= {"num_hidden_layers", "n_layer", "layer_types", "dtype", "torch_dtype"}, changed


def test_out_dot_a_non_numeric_table_and_greedy_on_an_encoder_are_clean(model_dirs, tmp_path, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("kept")
    result = invoke("angular", str(model_dirs["llama"]), "--dataset", "builtin", "--tokens", "64",
                    "--seq-len", "32", "--batch-size", "2", "--device", "cpu", "--out", ".")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mine.txt").read_text() == "kept"  # the run went to a timestamped sibling, nothing replaced
    reference = DEMO_REFERENCE / "angular"
    shutil.copytree(reference, tmp_path / "odd")
    lines = (reference / "angular.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[2] = "abc"
    (tmp_path / "odd" / "angular.csv").write_text("\n".join([*lines[:3], ",".join(cells), *lines[4:]]) + "\n")
    assert_error(invoke("compare", str(reference), str(tmp_path / "odd")), "is not a number")
    assert_error(invoke("prune", str(model_dirs["bert"]), "--task", "drift", "--curve", "--dataset",
                        "builtin", "--tokens", "64", "--seq-len", "32", "--device", "cpu", "--out",
                        str(tmp_path / "c")), "--strategies greedy picks layers by kl")


def test_nan_at_float32_names_the_checkpoint_not_the_dtype(source, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(source / "model.safetensors"))
    key = next(k for k in weights if "layers.1." in k and k.endswith("weight") and weights[k].dim() == 2)
    weights[key] = torch.full_like(weights[key], float("nan"))
    save_file(weights, str(source / "model.safetensors"), metadata={"format": "pt"})
    result = invoke("angular", str(source), "--dataset", "builtin", "--tokens", "64", "--seq-len", "32",
                    "--batch-size", "2", "--device", "cpu", "--dtype", "float32", "--out",
                    str(tmp_path / "n"))
    assert_error(result, f"has NaN or infinite values in {key} at float32")  # at load, naming the tensor
    assert "run with --dtype float32" not in result.output


def test_a_checkpoint_with_its_own_code_runs_and_exports_with_trust_remote_code(tokenizer, tmp_path):
    """Custom code that maps only its LM class: angular measures its base model; export saves the code beside the
    weights and reloads through the Auto class its config maps (the user trusted the code to export it)."""
    import shutil
    import sys

    import torch
    import transformers

    code = ("from transformers import LlamaConfig, LlamaForCausalLM\n\n\nclass CustomConfig(LlamaConfig):\n"
            "    model_type = 'custom_llama'\n\n\nclass CustomForCausalLM(LlamaForCausalLM):\n"
            "    config_class = CustomConfig\n")
    (tmp_path / "modeling_custom.py").write_text(code)
    sys.path.insert(0, str(tmp_path))
    try:
        from modeling_custom import CustomConfig, CustomForCausalLM
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(0)
    config = CustomConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
    config.auto_map = {"AutoConfig": "modeling_custom.CustomConfig",
                       "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    folder = tmp_path / "custom"
    CustomForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    shutil.copy(tmp_path / "modeling_custom.py", folder)
    common = ["--device", "cpu", "--dtype", "float32"]
    assert_error(invoke("angular", str(folder), "--dataset", "builtin", "--out", str(tmp_path / "a")),
                 "pass --trust-remote-code")
    result = invoke("angular", str(folder), "--dataset", "builtin", "--tokens", "64", "--seq-len", "32",
                    "--trust-remote-code", *common, "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    result = invoke("export", str(folder), "--remove", "0", "--trust-remote-code", *common,
                    "--out", str(tmp_path / "e"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "e" / "modeling_custom.py").is_file()
    record = json.loads((tmp_path / "e" / "layerprobe-removal.json").read_text())
    assert record["loads_with"] == "transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)"
    assert record["verified_max_difference"] is not None and record["verified_max_difference"] < 1e-4


def test_a_run_killed_before_its_first_save_resumes_from_the_start(model_dirs, tmp_path):
    """The folder a killed run leaves before saving anything (its lock marked unfinished) resumes, from scratch."""
    out = tmp_path / "cut"
    out.mkdir()
    (out / ".layerprobe.lock").write_text("unfinished\n")
    result = invoke("angular", str(model_dirs["llama"]), "--dataset", "builtin", "--tokens", "64",
                    "--seq-len", "32", "--batch-size", "2", "--device", "cpu", "--out", str(out),
                    "--resume")
    assert result.exit_code == 0, result.output
    assert (out / "summary.json").is_file() and not (out / ".layerprobe.lock").exists()


def test_an_angular_run_of_other_weights_is_refused_as_input(model_dirs, tmp_path):
    """Same layer count, other weights (qwen2 and llama both have 4 blocks): never correlated or used by a curve,
    unless --allow-other-weights."""
    common = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "32", "--batch-size", "2", "--device", "cpu"]
    assert invoke("angular", str(model_dirs["qwen2"]), *common, "--out", str(tmp_path / "a")).exit_code == 0
    for extra in ([], ["--curve", "--strategies", "angular", "--max-removed", "1"]):
        result = invoke("prune", str(model_dirs["llama"]), "--task", "kl", *common, *extra, "--angular",
                        str(tmp_path / "a"), "--out", str(tmp_path / f"p{len(extra)}"))
        assert_error(result, "measured other weights")
    allowed = invoke("prune", str(model_dirs["llama"]), "--task", "kl", *common, "--angular", str(tmp_path / "a"),
                     "--allow-other-weights", "--out", str(tmp_path / "allowed"))  # the user says so: it is used
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize("text", ["[tool]\nlayerprobe = 5\n", "[tool.layerprobe\nmodel = 'x'\n"])
def test_a_malformed_project_table_is_one_line(text, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert_error(invoke("angular", "minilm", "--dataset", "builtin"), "pyproject.toml")
