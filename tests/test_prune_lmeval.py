"""lm-eval sweeps on a local multiple-choice YAML task, checked against hand-scored loglikelihoods."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from .helpers import assert_error, independent_pruned, invoke

QUESTIONS = [
    ("The sky on a clear day is", ["blue", "green", "loud"], 0),
    ("Water freezes at zero degrees", ["celsius", "kelvin", "volts"], 0),
    ("A cat is a kind of", ["car", "animal", "number"], 1),
    ("The opposite of hot is", ["cold", "tall", "fast"], 0),
    ("Two plus two equals", ["five", "three", "four"], 2),
    ("Paris is the capital of", ["spain", "france", "italy"], 1),
    ("Bees make", ["honey", "bread", "steel"], 0),
    ("The sun rises in the", ["west", "north", "east"], 2),
    ("Ice is frozen", ["water", "sand", "paper"], 0),
    ("A week has seven", ["days", "hours", "years"], 0),
    ("Fish live in", ["trees", "water", "clouds"], 1),
    ("Snow is usually", ["black", "red", "white"], 2),
]  # 12 questions: at least MIN_DOCUMENTS (10), so the records' Holm verdicts are tested (test_records.py)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    data = folder / "mc.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n" for q, c, a in QUESTIONS))
    (folder / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return folder


def hand_accuracy(model, tok):
    """lm-eval's loglikelihood definition: continuation = tokens of (context + ' ' + choice) after the context,
    both encoded with the tokenizer's default special tokens (as HFLM.tok_encode does)."""
    correct = 0
    for question, choices, answer in QUESTIONS:
        scores = []
        for choice in choices:
            ctx = tok.encode(question)
            whole = tok.encode(question + " " + choice)
            cont = whole[len(ctx):]
            ids = torch.tensor([ctx + cont])
            with torch.no_grad():
                logp = model(input_ids=ids).logits[0].double().log_softmax(-1)
            scores.append(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)))
        correct += int(np.argmax(scores) == answer)
    return correct / len(QUESTIONS)


@pytest.mark.parametrize("split", [False, True])
def test_lmeval_sweep_matches_hand_scoring(split, model_dirs, task_dir, tmp_path):
    from .helpers import SPLIT

    folder = model_dirs["llama"]
    out = tmp_path / "run"
    # split: layers 1-2 offloaded to disk by an accelerate device map, the shared prefix restarting across the split
    placement = ["--device-map", json.dumps(SPLIT), "--offload", f"disk:{tmp_path}"] if split else ["--device", "cpu"]
    result = invoke("prune", str(folder), "--task", "tiny_mc", "--include-path", str(task_dir),
                    *placement, "--batch-size", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "prune.csv")
    acc = table[table["metric"] == "acc"].sort_values("layer")
    assert acc["layer"].tolist() == [0, 1, 2, 3]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    full = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert acc["baseline"].iloc[0] == pytest.approx(hand_accuracy(full, tok))
    for row in acc.itertuples():
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, [row.layer])
        assert row.pruned == pytest.approx(hand_accuracy(pruned, tok)), row
    assert acc["pruned_stderr"].notna().all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "acc" and summary["higher_is_better"] is True
    assert (out / "prune.png").is_file()


@pytest.mark.slow  # lm-eval indexes every task it ships (~17 s)
def test_unknown_task_suggests(model_dirs, task_dir, tmp_path):
    result = invoke("prune", str(model_dirs["llama"]), "--task", "tiny_mx", "--include-path",
                    str(task_dir), "--out", str(tmp_path / "x"))
    assert_error(result, "Did you mean: tiny_mc")


def test_missing_include_path_and_encoder(model_dirs, task_dir, tmp_path):
    result = invoke("prune", str(model_dirs["llama"]), "--task", "tiny_mc", "--include-path",
                    str(tmp_path / "nowhere"))
    assert_error(result, "does not exist")
    result = invoke("prune", str(model_dirs["bert"]), "--task", "tiny_mc", "--include-path",
                    str(task_dir), "--out", str(tmp_path / "y"))
    assert_error(result, "encoder")


FEWSHOT = [
    ("Name a color of the clear sky:", ["bright blue", "deep green", "very loud noise"], 0),
    ("Name something cold:", ["frozen ice cubes", "a hot stove", "the summer sun"], 0),
    ("Name an animal that barks:", ["a wooden chair", "a small dog", "an old river"], 1),
    ("Name a fruit:", ["a red apple", "a steel bolt", "a paper map"], 0),
    ("Name a planet:", ["the kitchen sink", "the planet mars", "a blue pencil"], 1),
    ("Name something you read:", ["a long book", "a tall tree", "a cold drink"], 0),
    ("Name a number:", ["purple rain", "forty two", "the open door"], 1),
    ("Name a tool:", ["a sharp hammer", "a sad song", "the evening news"], 0),
]


@pytest.fixture(scope="module")
def fewshot_dir(tmp_path_factory):
    """Multi-token choices, 2-shot from a separate split: contexts must match across variants."""
    folder = tmp_path_factory.mktemp("fewshot")
    (folder / "mc.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n"
                                             for q, c, a in FEWSHOT))
    (folder / "shots.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n"
                                                for q, c, a in QUESTIONS))
    (folder / "shot_mc.yaml").write_text(
        "task: shot_mc\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'mc.jsonl'}\n    train: {folder / 'shots.jsonl'}\n"
        "test_split: test\nfewshot_split: train\nnum_fewshot: 2\noutput_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return folder


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_shared_prefix_loglikelihoods_match_per_variant_hflm(arch, model_dirs, fewshot_dir):
    """Every variant's loglikelihoods from the shared pass equal HFLM's on an independently pruned model."""
    from lm_eval.models.huggingface import HFLM

    from layerprobe.evaluation.harness import HarnessTask, wrap_model
    from layerprobe.evaluation.variants import sweep
    from layerprobe.models.layers import find_blocks
    from layerprobe.models.load import load_model

    folder = model_dirs[arch]
    task = HarnessTask("shot_mc", str(fewshot_dir)).build()
    loaded = load_model(str(folder), head="causal-lm", device="cpu")
    stack = find_blocks(loaded.model)
    variants = sweep(len(stack), 1, None) + sweep(len(stack), 2, [1])
    shared = wrap_model(loaded.model, loaded.tokenizer, 3, stack, variants)
    inner = next(iter(task.loaded["tasks"].values()))
    inner.build_all_requests(rank=0, world_size=1)
    requests = [r for r in inner.instances]
    assert any(len(loaded.tokenizer.encode(" " + r.args[1], add_special_tokens=False)) > 1 for r in requests)
    shared.active = None
    with torch.inference_mode():
        base = shared.loglikelihood(requests)
        plain = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=3).loglikelihood(requests)
    np.testing.assert_allclose([x[0] for x in base], [x[0] for x in plain], atol=1e-5)
    assert [x[1] for x in base] == [x[1] for x in plain]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    for variant in variants:
        pruned = independent_pruned(folder, transformers.AutoModelForCausalLM, list(variant.removed))
        with torch.inference_mode():
            want = HFLM(pretrained=pruned, tokenizer=tok, batch_size=3).loglikelihood(requests)
        shared.active = variant.label
        computed = shared.computed
        encode = shared.tok_encode
        shared.tok_encode = None  # answered from the store before any tokenization: calling it would fail
        got = shared.loglikelihood(requests)
        shared.tok_encode = encode
        assert shared.computed == computed  # answered from the store, no forward pass
        np.testing.assert_allclose([x[0] for x in got], [x[0] for x in want], atol=1e-5, err_msg=variant.label)
        assert [x[1] for x in got] == [x[1] for x in want], variant.label


def test_shared_and_plain_sweeps_agree_from_the_cli(model_dirs, fewshot_dir, tmp_path):
    runs = {}
    for name, flags in {"shared": ["--shared-prefix"], "plain": ["--no-shared-prefix"],
                        "small": ["--max-memory", "1MB"]}.items():
        out = tmp_path / name
        result = invoke("prune", str(model_dirs["llama"]), "--task", "shot_mc", "--include-path",
                        str(fewshot_dir), "--device", "cpu", "--batch-size", "4", "--out", str(out),
                        *flags)
        assert result.exit_code == 0, result.output
        # lm-eval's warnings about the loaded model layerprobe hands it on purpose are not printed on every sweep
        assert "kwarg is not of type" not in result.output and "already-initialized" not in result.output
        runs[name] = pd.read_csv(out / "prune.csv").sort_values(["metric", "layer"]).reset_index(drop=True)
        summary = json.loads((out / "summary.json").read_text())
        if name == "shared":
            assert summary["shared_prefix"]["batch_size"] == 4 and "shared prefix: batch 4" in result.output
        if name == "small":  # the stored activations of one sequence already take most of 1 MB: batch 1, said
            assert summary["shared_prefix"]["batch_size"] == 1 and "batch 1 instead of 4" in " ".join(result.output.split())
    a = runs["shared"]
    assert set(a["metric"]) == {"acc", "acc_norm"}
    for other in ("plain", "small"):
        np.testing.assert_allclose(a[["baseline", "pruned", "delta"]], runs[other][["baseline", "pruned", "delta"]],
                                   atol=1e-12)
    bad = invoke("prune", str(model_dirs["llama"]), "--task", "shot_mc", "--max-memory", "lots")
    assert_error(bad, "--max-memory 'lots'")


def test_fewshot_contexts_repeat_across_evaluations(model_dirs, fewshot_dir):
    """lm-eval's few-shot sampler keeps its RNG between evaluations; every variant must see the same prompts."""
    from layerprobe.evaluation.harness import HarnessTask, wrap_model
    from layerprobe.models.load import load_model

    task = HarnessTask("shot_mc", str(fewshot_dir)).build()
    loaded = load_model(str(model_dirs["llama"]), head="causal-lm", device="cpu")
    lm = wrap_model(loaded.model, loaded.tokenizer, 4)
    seen = []
    score = lm.loglikelihood

    def recording(requests, **kwargs):
        seen.append([r.args for r in requests])
        return score(requests, **kwargs)

    lm.loglikelihood = recording
    with torch.inference_mode():
        first, second = task.evaluate(lm), task.evaluate(lm)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert len({args[0] for args in seen[0]}) > 1 and first == second


def test_a_sweep_resumed_after_the_baseline_shares_the_prefix_again(model_dirs, fewshot_dir, tmp_path):
    """Killed after the baseline and one variant: the resumed sweep answers the rest from one shared pass (no
    per-variant scoring), equals the uninterrupted sweep, counts both parts' seconds, and removes leftover temps."""
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import DataOptions, ModelOptions, PruneConfig

    def config(out, **kw):
        return PruneConfig(task="shot_mc", include_path=str(fewshot_dir), out=str(out), **kw,
                           model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                           data=DataOptions("builtin", tokens=64, seq_len=32, batch_size=4))

    whole = run_prune(config(tmp_path / "whole"))

    def kill_after_one_variant(stage, done, total):
        if stage == "variants" and done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune(config(tmp_path / "cut"), kill_after_one_variant)
    before = json.loads((tmp_path / "cut" / "state.json").read_text())["seconds_before"]
    (tmp_path / "cut" / ".prune.csv.abc.tmp").write_text("half")  # as a kill mid-write leaves it
    resumed = run_prune(config(tmp_path / "cut", resume=True))
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "prune.csv"), pd.read_csv(whole.folder / "prune.csv"),
                                  check_exact=True)
    # the per-document records too, byte for byte: the killed part's rows kept, the rest added once
    assert (resumed.folder / "samples.csv.gz").read_bytes() == (whole.folder / "samples.csv.gz").read_bytes()
    assert resumed.summary["shared_prefix"] is not None and not any("per variant" in w for w in resumed.warnings)
    assert resumed.summary["seconds"] > before > 0
    assert not list((tmp_path / "cut").glob(".*.tmp"))


def test_a_sweep_killed_inside_the_shared_pass_resumes_from_its_saved_requests(model_dirs, fewshot_dir, tmp_path,
                                                                              monkeypatch):
    """The shared pass (the unpruned model and every variant) is most of an lm-eval sweep: it reports progress per
    batch of requests and model by model inside a batch, saves what it answered, and a run stopped inside it
    resumes there, to the same numbers."""
    from layerprobe.commands.prune.run import run_prune
    from layerprobe.config import DataOptions, ModelOptions, PruneConfig
    from layerprobe.evaluation import shared_lm

    monkeypatch.setattr(shared_lm, "SAVE_EVERY", 0.0)  # save after every batch

    def config(out, **kw):
        return PruneConfig(task="shot_mc", include_path=str(fewshot_dir), out=str(out), **kw,
                           model=ModelOptions(str(model_dirs["llama"]), dtype="float32", device="cpu"),
                           data=DataOptions("builtin", tokens=64, seq_len=32, batch_size=2))

    seen = []
    whole = run_prune(config(tmp_path / "whole"), lambda *call: seen.append(call))
    steps = [(done, total) for stage, done, total in seen if stage.startswith("request")]
    assert steps[0][0] == 0 and steps[-1][0] == steps[-1][1] and len(steps) > 3  # batch by batch, to the end
    assert all(b[0] >= a[0] for a, b in zip(steps, steps[1:]))

    # inside a batch the bar moves model by model (the unpruned one, then each of the 4 variants)
    # (a batch's end is ticked twice; the bar stands between two ends model by model, in request tokens)
    ends = sorted({a[0] for a, b in zip(steps, steps[1:]) if a == b})
    assert len(ends) > 2 and all(any(x < d < y for d, _ in steps) for x, y in zip(ends, ends[1:]))

    def stop_inside_the_pass(stage, done, total):
        state = tmp_path / "cut" / "state.json"
        if stage.startswith("request") and 0 < done < total and state.is_file() and \
                json.loads(state.read_text()).get("shared_pass", {}).get("answers"):
            raise KeyboardInterrupt  # after a batch was saved

    with pytest.raises(KeyboardInterrupt):
        run_prune(config(tmp_path / "cut"), stop_inside_the_pass)
    saved = json.loads((tmp_path / "cut" / "state.json").read_text())["shared_pass"]["answers"]
    assert saved and "baseline" not in json.loads((tmp_path / "cut" / "state.json").read_text())
    again = []
    resumed = run_prune(config(tmp_path / "cut", resume=True), lambda *call: again.append(call))
    first = next(done for stage, done, _ in again if stage.startswith("request"))
    assert first >= len(saved) > 0  # the saved requests (a token or more each) were not computed again
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "prune.csv"), pd.read_csv(whole.folder / "prune.csv"))
    assert (resumed.folder / "samples.csv.gz").read_bytes() == (whole.folder / "samples.csv.gz").read_bytes()
    for run in (whole, resumed):  # a finished run keeps its baseline, not the pass's answers
        state = json.loads((run.folder / "state.json").read_text())
        assert "shared_pass" not in state and state["baseline"] and state["shared_prefix"]["batch_size"]
