"""layerprobe export: the folder reloads in a fresh process that never imports layerprobe, and its outputs equal
an independently shortened copy; mergekit's ranges describe exactly the kept layers; --part zeroes a sub-layer as
a hand-replaced forward does."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
import transformers

from .helpers import assert_error, independent_pruned, invoke

IDS = [[5, 17, 230, 41, 999, 12, 7, 88, 300, 2, 64, 9]]

RELOAD = """
import json, sys, torch, transformers
assert "layerprobe" not in sys.modules
for folder, cls, target in json.loads(sys.argv[1]):
    model = getattr(transformers, cls).from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(json.loads(sys.argv[2])))
    value = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    torch.save(value, target)
    print(json.dumps({"layers": model.config.num_hidden_layers,
                      "layer_types": getattr(model.config, "layer_types", None),
                      "modules": "layerprobe" in sys.modules}))
"""


def reload_in_fresh_process(jobs: list[tuple], tmp_path) -> list[tuple]:
    """(logits, facts) of each (folder, transformers class name), loaded in one fresh process that never imports
    layerprobe (one interpreter for all of them: its start-up is most of a reload's cost)."""
    targets = [str(tmp_path / f"out-{i}.pt") for i in range(len(jobs))]
    spec = json.dumps([[str(folder), cls, target] for (folder, cls), target in zip(jobs, targets)])
    done = subprocess.run([sys.executable, "-c", RELOAD, spec, json.dumps(IDS)], capture_output=True, text=True,
                          check=True)
    facts = [json.loads(line) for line in done.stdout.strip().splitlines()[-len(jobs):]]
    return [(torch.load(target, weights_only=True), fact) for target, fact in zip(targets, facts)]


def gemma2_dir(tokenizer, root):
    torch.manual_seed(0)
    config = transformers.Gemma2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                       max_position_embeddings=128, sliding_window=4,
                                       layer_types=["sliding_attention", "full_attention"] * 2)
    folder = root / "gemma2"
    transformers.Gemma2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def kept_from_mergekit(text: str) -> list[int]:
    """The layers a passthrough merge keeps, from its half-open layer_range lines."""
    kept = []
    for low, high in re.findall(r"layer_range: \[(\d+), (\d+)\]", text):
        kept += range(int(low), int(high))
    return kept


ARCHS = ["llama", "qwen2", "gemma2", "gpt2", "bert"]


@pytest.fixture(scope="module")
def exported(model_dirs, tokenizer, tmp_path_factory) -> dict:
    """arch -> (source folder, exported folder, class name, logits and facts of the reload): each tiny model with
    blocks 1-2 removed, all reloaded in one fresh process."""
    root = tmp_path_factory.mktemp("export")
    made = {}
    for arch in ARCHS:
        folder = gemma2_dir(tokenizer, root) if arch == "gemma2" else model_dirs[arch]
        out = root / f"exported-{arch}"
        result = invoke("export", str(folder), "--remove", "1-2", "--out", str(out), "--device", "cpu")
        assert result.exit_code == 0, (arch, result.output)
        cls = "BertForMaskedLM" if arch == "bert" else transformers.AutoConfig.from_pretrained(folder).architectures[0]
        made[arch] = (folder, out, cls)
    reloads = reload_in_fresh_process([(out, cls) for _, out, cls in made.values()], root)
    return {arch: (*made[arch], *reload) for arch, reload in zip(made, reloads)}


@pytest.mark.parametrize("arch", ARCHS)
def test_export_reloads_without_layerprobe(arch, exported):
    folder, out, cls, got, facts = exported[arch]
    assert facts["layers"] == 2 and facts["modules"] is False
    if arch == "gemma2":  # the kept layers 0 and 3 keep their own attention kinds
        assert facts["layer_types"] == ["sliding_attention", "full_attention"]
    reference = independent_pruned(folder, getattr(transformers, cls), [1, 2])
    with torch.no_grad():
        want = reference(input_ids=torch.tensor(IDS)).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    removal = json.loads((out / "layerprobe-removal.json").read_text())
    assert removal["removed"] == [1, 2] and removal["kept"] == [0, 3] and removal["part"] == "block"
    assert kept_from_mergekit((out / "mergekit.yaml").read_text()) == [0, 3]
    gain = removal["gain"]
    params = sum(p.numel() for p in reference.parameters())
    assert gain["parameters_exported"] == params and 0 < gain["time_ratio"]
    assert (out / "tokenizer.json").is_file() and removal["verified_max_difference"] <= 1e-4


def test_export_attention_part_equals_hand_zeroed(model_dirs, tmp_path):
    from tests.helpers import zero_by_hand

    folder, out = model_dirs["llama"], tmp_path / "no-attn"
    result = invoke("export", str(folder), "--remove", "0,3", "--part", "attn", "--out", str(out),
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    ((got, facts),) = reload_in_fresh_process([(out, "LlamaForCausalLM")], tmp_path)
    assert facts["layers"] == 4
    hand = zero_by_hand(transformers.AutoModelForCausalLM.from_pretrained(folder).eval(), "llama", "attn", [0, 3])
    with torch.no_grad():
        torch.testing.assert_close(got, hand(input_ids=torch.tensor(IDS)).logits, atol=1e-5, rtol=1e-5)
    assert not (out / "mergekit.yaml").exists()


def test_export_from_a_curve_run(model_dirs, tmp_path):
    folder = model_dirs["llama"]
    data = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "4"]
    curve = invoke("prune", str(folder), "--task", "kl", "--curve", "--strategies", "angular,last",
                   "--max-removed", "2", *data, "--keep", "0.5", "--out", str(tmp_path / "curve"))
    assert curve.exit_code == 0, curve.output
    import pandas as pd

    table = pd.read_csv(tmp_path / "curve" / "curve.csv")
    label = table[(table.strategy == "last") & (table.k == 2)]["removed"].iloc[0]
    result = invoke("export", "--from-curve", str(tmp_path / "curve"), "--strategy", "last", "--k", "2",
                    "--out", str(tmp_path / "x"))
    assert result.exit_code == 0, result.output
    removal = json.loads((tmp_path / "x" / "layerprobe-removal.json").read_text())
    assert removal["removed_label"] == label == "2-3" and removal["source_model"] == str(folder)


@pytest.mark.parametrize("args,needle", [
    (["--remove", "2-9"], "out of range"),
    (["--remove", "0-3"], "Cannot remove all 4 layers"),
    (["--remove", "3-1"], "the end is before the start"),
    (["--remove", "a"], "Bad --remove item 'a'"),
    ([], "Nothing to remove"),
    (["--remove", "1", "--part", "ffn"], "Unknown --part 'ffn'"),
])
def test_bad_export_input(args, needle, model_dirs, tmp_path):
    result = invoke("export", str(model_dirs["llama"]), *args, "--out", str(tmp_path / "x"))
    assert_error(result, needle)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.partial"))


def test_export_refuses_a_full_folder_and_bert_attn(model_dirs, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    assert_error(invoke("export", str(model_dirs["llama"]), "--remove", "1", "--out", str(tmp_path / "x")),
                 "exists and is not empty")
    assert_error(invoke("export", str(model_dirs["bert"]), "--remove", "1", "--part", "attn",
                        "--sublayer", "module", "--out", str(tmp_path / "y")),
                 "--part attn export: BertLayer has no output projection")
    assert not (tmp_path / "y").exists()


@pytest.mark.parametrize("part", ["attn", "mlp"])
def test_export_post_ln_branch_equals_hand_zeroed(part, model_dirs, tmp_path):
    """Post-LN BERT, --sublayer branch (the default): the dense projection zeroed, LayerNorm(x + 0) kept, reloads
    in plain transformers as a hand-replaced forward gives (norms made non-trivial so LayerNorm(x) != x)."""
    from .helpers import jitter_norms, zero_by_hand

    source = tmp_path / "bert"
    jitter_norms(transformers.BertForMaskedLM.from_pretrained(model_dirs["bert"])).save_pretrained(source)
    transformers.AutoTokenizer.from_pretrained(model_dirs["bert"]).save_pretrained(source)
    out = tmp_path / "no-sublayer"
    result = invoke("export", str(source), "--remove", "1", "--part", part, "--out", str(out))
    assert result.exit_code == 0, result.output
    ((got, facts),) = reload_in_fresh_process([(out, "BertForMaskedLM")], tmp_path)
    assert json.loads((out / "layerprobe-removal.json").read_text())["sublayer"] == "branch"
    hand = transformers.BertForMaskedLM.from_pretrained(source).eval()
    zero_by_hand(hand.bert, "bert", part, [1], "branch")
    skipped = transformers.BertForMaskedLM.from_pretrained(source).eval()
    zero_by_hand(skipped.bert, "bert", part, [1], "module")
    with torch.no_grad():
        torch.testing.assert_close(got, hand(input_ids=torch.tensor(IDS)).logits, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(got, skipped(input_ids=torch.tensor(IDS)).logits, atol=1e-3)
