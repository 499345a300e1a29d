"""Pruning sweeps checked against independently built shorter models and hand-computed scores."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import transformers

from layerprobe.config import DataOptions, ModelOptions, PruneConfig
from layerprobe.commands.prune.run import run_prune

from .helpers import assert_error, independent_pruned, invoke, reference_metric


def config(folder, tmp_path, task, **kw):
    data = DataOptions(kw.pop("dataset", "builtin"), tokens=kw.pop("tokens", 256), seq_len=kw.pop("seq_len", 32), batch_size=4)
    return PruneConfig(task=task, model=ModelOptions(str(folder), dtype="float32", device="cpu"), data=data,
                       out=str(tmp_path / kw.pop("name", "run")), **kw)


@pytest.mark.parametrize("arch,task", [("llama", "ppl"), ("qwen2", "kl"), ("gpt2", "ppl"), ("bert", "drift")])
def test_taskfree_matches_independent_models(arch, task, model_dirs, tmp_path):
    folder = model_dirs[arch]
    run = run_prune(config(folder, tmp_path, task))
    table = pd.read_csv(run.folder / "prune.csv")
    assert list(table.columns[:7]) == ["layer", "block", "removed", "metric", "baseline", "pruned", "delta"]
    assert table["layer"].tolist() == [0, 1, 2, 3]
    cls = {"drift": transformers.AutoModel}.get(task, transformers.AutoModelForCausalLM)
    full = cls.from_pretrained(folder).eval()
    for row in table.itertuples():
        expected = reference_metric(task, full, independent_pruned(folder, cls, [row.layer]), folder, 256, 32, 4)
        assert row.pruned == pytest.approx(expected, rel=1e-5, abs=1e-7)
        assert row.delta == pytest.approx(row.pruned - row.baseline)
    if task == "ppl":
        assert table["baseline"].iloc[0] == pytest.approx(reference_metric(task, full, full, folder, 256, 32, 4), rel=1e-6)
    else:
        assert (table["baseline"] == 0).all()


def test_shared_prefix_equals_naive_with_blocks(model_dirs, tmp_path):
    shared = run_prune(config(model_dirs["llama"], tmp_path, "kl", block=2, name="a"))
    naive = run_prune(config(model_dirs["llama"], tmp_path, "kl", block=2, shared_prefix=False, name="b"))
    assert shared.table["removed"].tolist() == ["0-1", "1-2", "2-3"]
    assert shared.table["pruned"].to_numpy() == pytest.approx(naive.table["pruned"].to_numpy(), rel=1e-6)


def test_resume_after_interruption(model_dirs, tmp_path):
    full = run_prune(config(model_dirs["gpt2"], tmp_path, "ppl", name="full"))
    calls = []

    def interrupt(stage, done, total):
        calls.append(done)
        if done >= 128:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune(config(model_dirs["gpt2"], tmp_path, "ppl", name="cut"), interrupt)
    state = json.loads((tmp_path / "cut" / "state.json").read_text())
    assert state["sums"]["batches"] == 1
    resumed = run_prune(config(model_dirs["gpt2"], tmp_path, "ppl", name="cut", resume=True))
    assert resumed.folder == tmp_path / "cut"
    assert resumed.table["pruned"].tolist() == pytest.approx(full.table["pruned"].tolist(), rel=1e-9)
    assert len(resumed.table) == 4
    # the per-sequence records of the batch saved before the kill are kept, the rest added: the same rows
    from layerprobe.evaluation.records import read_frame

    cut, whole = read_frame(resumed.folder), read_frame(full.folder)
    assert cut[["removed", "doc_id", "tokens"]].equals(whole[["removed", "doc_id", "tokens"]])
    assert cut["total"].tolist() == pytest.approx(whole["total"].tolist(), rel=1e-9)


def test_existing_run_is_not_overwritten(model_dirs, tmp_path):
    first = run_prune(config(model_dirs["gpt2"], tmp_path, "ppl", layers="0"))
    second = run_prune(config(model_dirs["gpt2"], tmp_path, "ppl", layers="0"))
    assert first.folder != second.folder and first.folder.exists() and second.folder.name.startswith("run-")


def test_project_config_supplies_model_and_task(model_dirs, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.layerprobe]\nmodel = "{model_dirs["llama"]}"\ntasks = ["drift"]\ndataset = "builtin"\n'
        f'tokens = 128\nseq_len = 32\nout = "{tmp_path / "ci"}"\n'
    )
    monkeypatch.chdir(tmp_path)
    result = invoke("prune", "--layers", "2-3", "--device", "cpu")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "ci" / "prune-drift" / "prune.csv")
    assert table["layer"].tolist() == [2, 3] and (table["metric"] == "drift").all()
    result = invoke("angular", "--device", "cpu")  # same project: model, corpus, tokens and out from the file
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "ci" / "angular" / "summary.json").read_text())
    assert summary["model"] == str(model_dirs["llama"]) and summary["tokens"] == 128 and summary["seq_len"] == 32


@pytest.mark.parametrize("args,needle", [
    (["--task", "drift", "--layers", "7"], "out of range"),
    (["--task", "drift", "--layers", "x"], "Bad --layers"),
    (["--task", "drift", "--block", "4"], "--block 4"),
    (["--task", "ppl"], "encoder"),
])
def test_bad_prune_input(args, needle, model_dirs, tmp_path):
    result = invoke("prune", model_dirs["bert"], "--dataset", "builtin", "--tokens", 64, "--out", tmp_path / "x", *args)
    assert_error(result, needle)


def test_resume_without_run_and_bad_toml(model_dirs, tmp_path, monkeypatch):
    result = invoke("prune", model_dirs["gpt2"], "--task", "ppl", "--dataset", "builtin", "--out", tmp_path / "none",
                    "--resume")
    assert_error(result, "does not exist")
    (tmp_path / "layerprobe.toml").write_text("modle = 'x'\n")
    monkeypatch.chdir(tmp_path)
    result = invoke("prune", "--task", "ppl")
    assert_error(result, "Did you mean: model")
