"""A fold is verified, not assumed (issue 47, rule 1): for every causal family of the architecture matrix (and
Granite, whose blocks scale the MLP output by residual_multiplier after the projection), heal's training-free repair
either folds exactly (checked here by hand on the residual stream: the merged block's output equals the unfolded
block's output - r y + r y T, r read from the config by hand) or refuses with one line; a scale or a Post-LN norm
the architecture table does not know is refused by the fold's own check, naming the architecture."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
import transformers

from layerprobe.errors import ArchitectureError
from layerprobe.hooks import block_hidden
from layerprobe.models import layers
from layerprobe.models.layers import find_blocks, fold_target
from layerprobe.models.surgery import removed_layers
from layerprobe.progress import silent
from layerprobe.repair.replace import repair
from layerprobe.repair.verify import FOLD_NOISE

from .helpers import assert_error, invoke
from .test_matrix import DEC, families

VOCAB = 96
CAUSAL = [name for name, build in families(VOCAB, 1, 2).items() if build()[1] == "causal"]
# by hand from each config: what a block multiplies its MLP projection's output by before the residual add
SCALE = {"granite": 0.5}


def build(family: str, vocab: int = VOCAB):
    if family == "granite":
        config = transformers.GraniteConfig(**DEC, vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                            residual_multiplier=SCALE["granite"])
    elif family == "opt_post_ln":
        config = transformers.OPTConfig(vocab_size=vocab, hidden_size=32, ffn_dim=64, num_hidden_layers=4,
                                        num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=32,
                                        do_layer_norm_before=False, pad_token_id=0)
    else:
        config = families(VOCAB, 1, 2)[family]()[0]
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def tokens(seed: int):
    return torch.randint(3, VOCAB, (2, 16), generator=torch.Generator().manual_seed(seed))


def heal_block_2(model):
    """heal --method lstsq of block 2 on a copy; (the unfolded teacher, the folded student, the Repair)."""
    teacher, student = model, copy.deepcopy(model)
    result = repair(student, find_blocks(student), [2], [tokens(1), tokens(2)], "lstsq", 0.0, 0, 0.0, "cpu", silent,
                    teacher=teacher, heldout=[SimpleNamespace(input_ids=tokens(3))])
    return teacher, student, result


def block_1_output(model, stack, ids, x):
    """(block 1's output, its MLP projection's output) in `model` without `ids`, on tokens x."""
    seen = {}
    handles = [stack.blocks[1].register_forward_hook(lambda m, a, out: seen.__setitem__("h", block_hidden(out))),
               fold_target(model, stack, 1).register_forward_hook(lambda m, a, out: seen.__setitem__("y", out))]
    try:
        with removed_layers(model, ids, stack), torch.no_grad():
            model(input_ids=x, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen["h"].double(), seen["y"].double().reshape(seen["h"].shape)


@pytest.mark.parametrize("family", [*CAUSAL, "granite"])
def test_every_family_folds_exactly_or_refuses(family):
    model = build(family)
    try:
        teacher, student, result = heal_block_2(model)
    except ArchitectureError as exc:
        message = str(exc)
        assert "\n" not in message and "use --method lora or tail" in message, message
        assert "--part" not in message
        return
    T = next(iter(result.transforms.values()))
    r = SCALE.get(family, 1.0)
    x = tokens(4)
    plain, y = block_1_output(teacher, find_blocks(teacher), [2], x)
    folded, _ = block_1_output(student, find_blocks(student), [2], x)
    want = plain - r * y + (r * y) @ T
    assert torch.allclose(folded, want, atol=1e-4, rtol=1e-4), (family, float((folded - want).abs().max()))
    assert result.fold_difference < FOLD_NOISE["float32"]


@pytest.mark.parametrize("family, unknown", [("granite", ("OUTPUT_SCALES", ())),
                                              ("opt_post_ln", ("POST_LN_FLAGS", {}))])
def test_what_the_architecture_table_misses_the_fold_check_refuses(family, unknown, monkeypatch):
    """Granite's scale and OPT's Post-LN flag taken out of layerprobe's table: the fold is not exact, and the check
    after folding refuses it, naming the architecture, where it would have been saved as repaired."""
    monkeypatch.setattr(layers, unknown[0], unknown[1])
    model = build(family)
    with pytest.raises(ArchitectureError) as caught:
        heal_block_2(model)
    message = str(caught.value)
    assert family.split("_")[0] in message and "differ from the fitted model's" in message, message
    assert "use --method lora or tail" in message


def test_post_ln_opt_is_refused_with_heals_own_options(tmp_path, tokenizer):
    folder = tmp_path / "opt"
    build("opt_post_ln", len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = invoke("heal", folder, "--remove", "2", "--method", "lstsq", "--dataset", "builtin", "--tokens", "64",
                    "--seq-len", "16", "--batch-size", "2", "--device", "cpu", "--no-gain", "--out", tmp_path / "h")
    assert_error(result, "Post-LN")
    assert "--method lora or tail" in result.output and "--part" not in result.output
    assert not (tmp_path / "h").exists()


def test_heal_of_a_healed_checkpoint_says_so(model_dirs, tmp_path):
    """heal of a heal run's merged/ names what it is, and never re-heals the original its record names."""
    run = tmp_path / "healed"
    tiny = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
            "--no-gain", "--dtype", "float32"]
    assert invoke("heal", model_dirs["llama"], "--remove", "2", "--method", "lstsq", *tiny, "--out", run).exit_code == 0
    result = invoke("heal", run / "merged", "--method", "lstsq", *tiny, "--out", tmp_path / "again")
    assert_error(result, "already healed")
    assert str(model_dirs["llama"]) in result.output and "--remove 2" in result.output
    assert not (tmp_path / "again").exists()
    record = json.loads((run / "merged" / "layerprobe-removal.json").read_text())
    assert record["healing"]["method"] == "lstsq"


def _tensor(folder, name):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")[name]


@pytest.mark.slow  # a heal, a curve and four exports of the tiny LLaMA
def test_a_checkpoint_layerprobe_made_is_named_then_built_on_or_refused(model_dirs, tmp_path):
    """Rule 1's second half, over every source layerprobe writes (an export, a heal run's merged/, an export of an
    export, a heal run folder) and every command that takes it as MODEL (export --remove, export --from-curve, heal,
    heal --remove, angular): the first line says what the source is; export builds on it (its blocks renumbered,
    checked on the weights themselves), heal refuses what it cannot heal consistently; nothing is re-derived from the
    original silently (docs/errors.md, 'A checkpoint layerprobe made')."""
    llama = model_dirs["llama"]  # 4 blocks
    tiny = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu",
            "--dtype", "float32"]
    export, healed, twice = tmp_path / "e1", tmp_path / "heal", tmp_path / "e2"
    assert invoke("export", llama, "--remove", "1", "--out", export, "--no-verify").exit_code == 0
    assert invoke("heal", llama, "--remove", "2", "--method", "lstsq", *tiny, "--no-gain", "--out",
                  healed).exit_code == 0
    curve = tmp_path / "curve"
    assert invoke("prune", llama, "--task", "kl", "--curve", "--strategies", "last", "--max-removed", "1", *tiny,
                  "--out", curve).exit_code == 0

    # export of an export: builds on it; block 1 of the export is block 2 of the original (kept 0, 2, 3)
    result = invoke("export", export, "--remove", "1", "--out", twice)
    assert result.exit_code == 0, result.output
    assert f"'{export}' is an export of {llama} with block 1 removed (4 -> 3 blocks)" in " ".join(result.output.split())
    record = json.loads((twice / "layerprobe-removal.json").read_text())
    assert record["original"] == {"model": str(llama), "removed": [1, 2], "kept": [0, 3]}
    assert record["source_removal"]["removed"] == [1] and record["removed"] == [1]
    key = "model.layers.{}.mlp.down_proj.weight"
    assert torch.equal(_tensor(twice, key.format(1)), _tensor(llama, key.format(3)))

    # export of a healed merged/: builds on the healed weights, never the original's
    again = tmp_path / "e3"
    result = invoke("export", healed / "merged", "--remove", "0", "--out", again, "--no-verify")
    assert result.exit_code == 0 and "is the healed checkpoint" in result.output, result.output
    record = json.loads((again / "layerprobe-removal.json").read_text())
    assert record["source_removal"]["healing"]["method"] == "lstsq" and record["original"]["removed"] == [0, 2]
    folded = _tensor(healed / "merged", key.format(1))  # block 1 carries the map of removed block 2
    assert torch.equal(_tensor(again, key.format(0)), folded)
    assert not torch.equal(folded, _tensor(llama, key.format(1)))

    refused = {  # command line -> what its one line says
        ("export", export, "--from-curve", curve, "--strategy", "last", "--k", "1",
         "--allow-other-weights"): "block ids number the source's",
        ("heal", export, "--remove", "1", "--method", "lstsq"): f"'{export}' is an export of {llama} with block 1",
        ("heal", healed / "merged", "--method", "lstsq"): "so it is already healed",
        ("heal", healed / "merged", "--remove", "1", "--method", "lstsq"): "so it is already healed",
        ("heal", healed, "--method", "lstsq"): f"'{healed}' is a heal run folder, not a model",
        ("export", healed, "--remove", "1"): f"'{healed}' is a heal run folder, not a model",
        ("angular", healed): f"'{healed}' is a heal run folder, not a model",
    }
    for n, (args, needle) in enumerate(refused.items()):
        extra = tiny if args[0] in ("heal", "angular") else []
        result = invoke(*args, *extra, "--out", tmp_path / f"refused-{n}")
        assert_error(result, needle)
        assert not (tmp_path / f"refused-{n}").exists()

    # heal of an export of an export: heals the record's removal from its source (the first export), and says so
    result = invoke("heal", twice, "--method", "lstsq", *tiny, "--no-gain", "--out", tmp_path / "h2")
    assert result.exit_code == 0, result.output
    assert f"removes block(s) 1 of '{export}', an export of {llama}" in " ".join(result.output.split())
    assert json.loads((tmp_path / "h2" / "merged" / "layerprobe-removal.json").read_text())["source_model"] == str(export)


@pytest.mark.parametrize("method", ["lstsq", "cosine"])
def test_a_curve_healed_by_a_fold_the_architecture_cannot_carry_is_refused_before_the_sweep(method, tmp_path,
                                                                                           tokenizer):
    """prune --curve --heal lstsq|cosine on a Post-LN OPT, where no block can carry a folded map: one line before any
    set is scored, naming the architecture and --heal (not --method, not --part), never a curve whose every healed
    score is NaN behind a warning per set (what `heal` refuses, the curve refuses too)."""
    folder = tmp_path / "opt"
    build("opt_post_ln", len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = invoke("prune", folder, "--task", "kl", "--curve", "--strategies", "last", "--max-removed", "1",
                    "--heal", method, "--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size",
                    "2", "--device", "cpu", "--out", tmp_path / "c")
    assert_error(result, f"--heal {method} can repair no removal here: opt is Post-LN")
    assert "use --heal lora or tail" in result.output and "--method" not in result.output
    assert "--part" not in result.output
    assert not (tmp_path / "c").exists()


def test_the_merged_checkpoint_of_an_unfinished_heal_is_named_as_such(model_dirs, tmp_path):
    """What a heal killed after its merged/ rename leaves (the lock naming heal, no summary.json): export, angular and
    heal are told the run never finished and how to finish it, not handed 'the healed checkpoint'."""
    import shutil

    run = tmp_path / "heal"
    shutil.copytree(model_dirs["llama"], run / "merged")
    (run / ".layerprobe.lock").write_text("123@host\ncommand heal\nfile replace.csv\n", encoding="utf-8")
    for command in (["export", run / "merged", "--remove", "0", "--out", tmp_path / "e"],
                    ["angular", run / "merged", "--dataset", "builtin", "--tokens", "64", "--out", tmp_path / "a"]):
        result = invoke(*command)
        assert_error(result, "is the merged/ checkpoint of a heal run that has not finished")
        assert f"--resume --out {run}" in " ".join(result.output.split())


def test_the_merged_checkpoint_of_a_heal_without_its_summary_is_not_taken(model_dirs, tmp_path):
    """Issue 47, replay K2_hsim: a finished heal run whose summary.json is gone (its manifest.json names heal), with a
    lock layerprobe did not write: export is refused naming the missing summary, not handed 'the healed checkpoint'."""
    import shutil

    run = tmp_path / "heal"
    shutil.copytree(model_dirs["llama"], run / "merged")
    (run / "manifest.json").write_text(json.dumps({"command": "heal", "files": ["merged", "manifest.json"]}))
    (run / ".layerprobe.lock").write_text('{"pid": 1}', encoding="utf-8")
    result = invoke("export", run / "merged", "--remove", "0", "--out", tmp_path / "e")
    assert_error(result, "is the merged/ checkpoint of a heal run whose summary.json is missing")
    assert not (tmp_path / "e").exists()

