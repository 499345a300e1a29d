"""Issue 41 rule 2: a NaN or infinite result is an error naming its cause (a diverging rate, a broken checkpoint, a
score never ranked, a toy branch scale that overflows, a gradnorm training that diverges), for every command."""

from __future__ import annotations

import math
import shutil
from types import SimpleNamespace

import pytest

import layerprobe
from layerprobe import LayerprobeError
from tests.helpers import assert_error, invoke
from tests.every_command import run_args


# ---- rule 2: a NaN or infinite result is an error ------------------------------------------------------------------

@pytest.mark.slow  # a healing step or curve per case on a tiny model
@pytest.mark.parametrize("args,flag", [
    (["heal", "--lr", "1e30"], "--lr"),
    (["heal", "--lr", "inf"], "--lr"),
    (["curve", "--heal-steps", "1", "--heal-lr", "1e30"], "--heal-lr"),
    (["heal", "--lora-alpha", "1e30"], "--lora-alpha"),  # an infinite gradient norm: clipped, it zeroes every step
])
def test_a_diverging_rate_is_an_error_naming_it(args, flag, model_dirs, tmp_path):
    out = tmp_path / "run"
    result = invoke(*run_args(args[0], model_dirs, out, *args[1:]))
    assert_error(result, flag)
    assert "checkpoint" not in result.output.split("error:")[1]
    assert not (out / "summary.json").exists() and not (out / "merged").exists()


def test_a_non_finite_healing_step_names_its_cause():
    """Every place heal_loop stops, and the setting each names: the checkpoint before any update (step-0 scores,
    the first loss), --lora-alpha where it scales the update far past the usual, else the rate."""
    from layerprobe.repair.loop import _check_step, _diverged
    from layerprobe.config import HealConfig
    from layerprobe.errors import NumericsError

    from layerprobe import ModelOptions

    ckpt = ModelOptions("ckpt")
    base = HealConfig(model=ckpt, remove="1")
    big = HealConfig(model=ckpt, remove="1", lora_alpha=1e30)
    tail = HealConfig(model=ckpt, remove="1", lora_alpha=1e30, method="tail")
    cases = [  # (call, what the message names, what it must not)
        (lambda: _diverged("scores nan", 0, big, "--lr", "torch.float32"), "checkpoint 'ckpt'", "--lora-alpha"),
        (lambda: _check_step(big, 1, "--lr", "torch.float32", math.nan, None), "checkpoint 'ckpt'", "--lora-alpha"),
        (lambda: _check_step(base, 1, "--lr", "torch.float16", 1.0, math.inf), "--dtype float32", "--lr"),
        (lambda: _check_step(big, 1, "--lr", "torch.float32", 1.0, math.inf), "--lora-alpha 1e+30", "checkpoint"),
        (lambda: _check_step(big, 3, "--lr", "torch.float32", math.nan, None), "--lora-alpha 1e+30", "--lr "),
        (lambda: _check_step(base, 3, "--lr", "torch.float32", 1.0, math.nan), "--lr 0.0002", "checkpoint"),
        (lambda: _check_step(tail, 3, "--lr", "torch.float32", math.inf, None), "--lr 0.0002", "--lora-alpha"),
        (lambda: _check_step(base, 2, "--heal-lr", "torch.float32", math.inf, None), "--heal-lr", "checkpoint"),
    ]
    for call, names, never in cases:
        with pytest.raises(NumericsError) as caught:
            error = call()
            if isinstance(error, NumericsError):
                raise error
        assert names in str(caught.value) and never not in str(caught.value), str(caught.value)
    _check_step(base, 1, "--lr", "torch.float32", 1.0, 1e6)  # finite: goes on


def test_a_non_finite_repair_score_is_an_error(model_dirs):
    """lstsq/cosine: held-out scores of the folded model (heal) that come out NaN are one line naming the cause
    (the maps: --ridge; the checkpoint before any map: --dtype float32), never a merged/ scored NaN."""
    import torch
    import transformers

    from layerprobe.repair.replace import paired_scores
    from layerprobe.errors import NumericsError

    heldout = [SimpleNamespace(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6]]))]

    def model():
        return transformers.AutoModelForCausalLM.from_pretrained(model_dirs["llama"]).eval()

    def score(teacher, student):
        return paired_scores(teacher, student, "model.layers", [2], heldout, "cpu")

    good = model()
    assert set(score(good, model())) == {"before", "after", "unpruned", "sequences", "change"}  # change: paired
    nan_teacher, inf_fold = model(), model()
    nan_teacher.model.embed_tokens.weight.data.fill_(math.nan)
    inf_fold.model.layers[1].mlp.down_proj.weight.data.fill_(math.inf)  # the projection the map of block 2 folds into
    with pytest.raises(NumericsError, match="before any map"):
        score(nan_teacher, model())
    with pytest.raises(NumericsError, match="the folded maps make it: raise --ridge"):
        score(good, inf_fold)


@pytest.fixture(scope="module")
def broken_weights(model_dirs, tmp_path_factory):
    """The tiny LLaMA with a NaN in one tensor, and with every weight scaled by 1e38 (finite, but no norm survives:
    every logit comes out 0 and every kl 0)."""
    from safetensors.torch import load_file, save_file

    folders = {}
    for name, change in (("nan", "nan"), ("scaled", "scale")):
        folder = tmp_path_factory.mktemp(name)
        shutil.copytree(model_dirs["llama"], folder, dirs_exist_ok=True)
        tensors = load_file(folder / "model.safetensors")
        if change == "nan":
            tensors["model.layers.2.mlp.up_proj.weight"][0, 0] = math.nan
        else:
            tensors = {k: v * 1e38 for k, v in tensors.items()}
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        folders[name] = folder
    return folders


@pytest.mark.parametrize("command", ["angular", "prune", "curve", "heal", "export"])
def test_a_broken_checkpoint_is_named_by_every_command(command, broken_weights, tmp_path):
    """Every command that loads a model: the checkpoint and the tensor, before any forward (never a ranking of
    zeros, nor a healing blamed on --lr, nor an export blamed on the architecture)."""
    for kind, tensor in (("nan", "layers.2.mlp.up_proj.weight"), ("scaled", "embed_tokens.weight")):
        args = run_args(command, {"llama": broken_weights[kind]}, tmp_path / kind)
        result = invoke(*args)
        assert_error(result, f"has {'NaN or infinite values' if kind == 'nan' else 'values up to'}")
        assert tensor in result.output and "--lr" not in result.output and "architecture" not in result.output
        assert not (tmp_path / kind).exists()


def test_a_non_finite_score_is_never_ranked():
    """The sweep paths a checked forward does not cover: an evaluation's scores (lm-eval, SQuAD) and an lm-eval
    multiple-choice loglikelihood (argmax would still pick a choice) are one line, never a row."""
    from layerprobe.commands.prune.sweeps import _check_finite, _check_scores
    from layerprobe.errors import NumericsError
    from layerprobe.evaluation.records import _choice_fields
    from layerprobe.evaluation.taskfree import Sums

    loaded = SimpleNamespace(spec="ckpt", dtype="float32")
    _check_scores({"acc": (0.5, 0.1), "acc_stderr_missing": (0.5, math.nan)}, None, loaded)
    for scores, label in (({"acc": (math.nan, 0.1)}, None), ({"f1": (math.inf, 0.0)}, "1")):
        with pytest.raises(NumericsError, match="'ckpt' scores a NaN"):
            _check_scores(scores, label, loaded)
    for sums in (Sums([math.nan, 3], {}), Sums([1.0, 3], {"2": [math.inf, 3]})):
        with pytest.raises(NumericsError, match="'ckpt'"):
            _check_finite(sums, "kl", 0, loaded)
    task = SimpleNamespace(doc_to_choice=lambda doc: ["a", "b"], config=SimpleNamespace(task="arc_easy"))
    sample = {"doc": {}, "doc_id": 4, "target": 0, "filtered_resps": [(math.nan, False), (-1.0, False)]}
    with pytest.raises(NumericsError, match="document 4 of arc_easy"):
        _choice_fields(sample, task)

# ---- overflow in the toy and in gradnorm training ----------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["pre", "post"])
def test_a_toy_branch_scale_that_overflows_is_one_line_from_cli_and_library(norm, tmp_path):
    """--branch-scale 1e30 overflows float32 inside the blocks: the SVD of the effective rank raised a LinAlgError
    traceback; now one line naming the option, and no folder."""
    result = invoke("toy", "--depth", 4, "--width", 8, "--samples", 16, "--norm", norm, "--branch-scale", "1e30",
                    "--out", tmp_path / "cli")
    assert_error(result, "--branch-scale 1e+30 overflows float32")
    assert not (tmp_path / "cli").exists()
    with pytest.raises(LayerprobeError, match="use a smaller --branch-scale"):
        layerprobe.toy(layerprobe.ToyConfig(norms=(norm,), depth=4, width=8, samples=16, alphas=(1e30,),
                                            out=str(tmp_path / "lib")))
    assert not (tmp_path / "lib").exists()

def test_a_gradnorm_training_that_diverges_names_lr_not_the_checkpoint(tmp_path):
    """--arch tiny has no checkpoint to blame: numbers finite at step 0 and not after training are the rate's."""
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--dataset", "builtin", "--device", "cpu",
                    "--seeds", 1, "--batches", 1, "--seq-len", 16, "--batch-size", 2, "--steps", 3, "--lr", "1e30",
                    "--out", tmp_path / "gn")
    assert_error(result, "the training diverged at --lr 1e+30: lower --lr")
    assert "checkpoint" not in result.output
