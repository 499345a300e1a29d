"""The cheap checks and first messages: every cheap problem named at once, in order; the dataset default from the
environment and the project; the exact offline command; warnings only about what was asked; one name per meaning;
plain report titles and progress lines."""

from __future__ import annotations

import os
import subprocess
import sys

from .helpers import assert_error, invoke

SMALL = ["--tokens", "64", "--seq-len", "32", "--batch-size", "2", "--device", "cpu"]


def test_every_cheap_problem_is_named_at_once(minilm_dir, tmp_path):
    missing = tmp_path / "none.json"
    result = invoke("prune", "no-such-org/no-such-model", "--task", "squad", "--dataset", str(missing),
                    "--out", str(tmp_path / "r"))
    assert_error(result, "2 problems: (1) Model 'no-such-org/no-such-model' is neither a local folder nor in the hub "
                 "cache, and the hub is offline")
    assert f"(2) SQuAD file '{missing}' does not exist" in " ".join(result.output.split())
    no_head = invoke("prune", str(minilm_dir), "--task", "squad", "--dataset", str(missing),
                     "--out", str(tmp_path / "r"))
    assert_error(no_head, "was saved as BertModel (no QA head)")
    # an impossible option value is refused first, by the settings' own check; then every run problem at once
    assert_error(invoke("angular", "no-such-org/no-such-model", "--dataset", "c4", "--tokens", "0"),
                 "--tokens must be at least 2, got 0")
    both = invoke("angular", "no-such-org/no-such-model", "--dataset", "c4", "--tokens", "64",
                  "--seq-len", "100000")
    assert_error(both, "2 problems: (1) Model 'no-such-org/no-such-model' is neither a local folder nor in the hub "
                 "cache")
    assert not (tmp_path / "r").exists()


def test_the_offline_error_shows_the_command_that_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "layerprobe", "angular", "minilm", "--tokens", "64", "--out",
                           str(tmp_path / "a")], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "LAYERPROBE_DATASET": ""})
    assert done.returncode == 2
    text = " ".join(done.stdout.split() + done.stderr.split())
    assert f"Offline: layerprobe angular minilm --tokens 64 --out {tmp_path / 'a'} --dataset builtin" in text


def test_dataset_default_from_environment_and_project(model_dirs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERPROBE_DATASET", "builtin")
    result = invoke("gradnorm", "--arch", "tiny", "--norm", "pre", "--seeds", "1", "--batches", "1",
                    "--seq-len", "16", "--batch-size", "2", "--device", "cpu", "--out", str(tmp_path / "g"))
    assert result.exit_code == 0, result.output
    monkeypatch.delenv("LAYERPROBE_DATASET")
    (tmp_path / "layerprobe.toml").write_text('dataset = "builtin"\n')
    result = invoke("angular", str(model_dirs["llama"]), *SMALL, "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    (tmp_path / "layerprobe.toml").write_text('dataset = "c4"\n')
    monkeypatch.setenv("LAYERPROBE_DATASET", "builtin")  # the environment wins over the project file
    result = invoke("angular", str(model_dirs["llama"]), *SMALL, "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output


def test_seq_len_warning_only_for_what_was_asked(model_dirs, tmp_path):
    """The tiny models have 128 positions: the default 1024 is capped silently, an asked 1024 is named."""
    base = ["angular", str(model_dirs["llama"]), "--dataset", "builtin", "--tokens", "256", "--batch-size", "2"]
    quiet = invoke(*base, "--out", str(tmp_path / "q"))
    assert quiet.exit_code == 0 and "exceeds" not in quiet.output, quiet.output
    asked = invoke(*base, "--seq-len", "1024", "--out", str(tmp_path / "a"))
    assert asked.exit_code == 0
    assert "--seq-len 1024 exceeds the model's 128 positions (max_position_embeddings); using 128" in " ".join(
        asked.output.split())


def test_one_name_per_meaning_and_one_way_to_show_defaults():
    helps = {c: " ".join(invoke(c, "--help").output.split())
             for c in ("angular", "prune", "gradnorm", "toy", "report", "compare", "merge", "demo", "export", "heal")}
    for command, text in helps.items():
        assert "[default:" not in text and "<bool>" not in text, command
    assert "--mix-alpha" in helps["gradnorm"] and "--alpha " not in helps["gradnorm"]
    assert "--mix-alpha" in helps["toy"] and "--branch-scale" in helps["toy"] and "--alpha " not in helps["toy"]
    assert "--out" in helps["compare"] and "--output" not in helps["compare"]
    # the old spellings still work, hidden
    assert_error(invoke("gradnorm", "--arch", "tiny", "--alpha", "1.5", "--dataset", "builtin"),
                 "--mix-alpha must be within [0, 1], got 1.5")
    assert_error(invoke("gradnorm", "--arch", "tiny", "--mix-alpha", "1.5", "--dataset", "builtin"),
                 "--mix-alpha must be within [0, 1], got 1.5")


def test_report_markdown_has_no_entities_and_titles_no_local_paths(model_dirs, tmp_path):
    run = tmp_path / "runs" / "angular"
    assert invoke("angular", str(model_dirs["llama"]), *SMALL, "--dataset", "builtin",
                  "--out", str(run)).exit_code == 0
    assert invoke("report", str(tmp_path / "runs"), "--out", str(tmp_path / "page")).exit_code == 0
    markdown = (tmp_path / "page" / "report.md").read_text()
    assert "&#" not in markdown and "&amp;" not in markdown
    assert "Python's built-in documentation" in markdown
    headings = [line for line in markdown.splitlines() if line.startswith("#")]
    assert "### llama" in headings and not any(str(tmp_path) in h for h in headings)


def test_toy_progress_counts_layers_and_prints_plain_lines_in_a_log(tmp_path):
    from layerprobe.commands.toy.run import run_toy
    from layerprobe.config import ToyConfig

    calls = []
    run_toy(ToyConfig(norms=("pre", "post"), depth=6, width=8, samples=32, out=str(tmp_path / "t")),
            lambda *call: calls.append(call))
    assert calls == [("layers", i, 12) for i in range(13)]  # 2 placements x 6 layers, every one
    log = tmp_path / "log.txt"
    with open(log, "w") as handle:  # not a terminal, as in CI
        done = subprocess.run([sys.executable, "-m", "layerprobe", "toy", "--norm", "pre", "--depth", "4", "--width",
                               "8", "--samples", "32", "--out", str(tmp_path / "u")], stdout=handle, stderr=handle)
    assert done.returncode == 0
    text = log.read_text()
    assert "layers: 4/4 done" in text and "\x1b[" not in text  # plain lines, no terminal control codes
