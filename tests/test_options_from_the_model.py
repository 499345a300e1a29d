"""An option that does nothing is refused from the CLI too (issue 47, rule 4), where it can only be known once the
model's config is read: angular --lens-tokens for a model without an LM head (BERT) is refused from the config,
before any weights load and before a run folder is made; the one rule's nested and shared-group cases (gradnorm's
--lr without --steps, prune's --tokens with an lm-eval task) end the CLI in one line too."""

from __future__ import annotations

from tests.helpers import assert_error, invoke

TINY = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"]


def test_lens_tokens_for_a_model_without_an_lm_head_is_refused_before_the_weights_load(model_dirs, tmp_path,
                                                                                        monkeypatch):
    import layerprobe.commands.probe as probe

    def no_load(*args, **kwargs):
        raise AssertionError("the weights were loaded before the refusal")

    monkeypatch.setattr(probe, "load_model", no_load)
    out = tmp_path / "run"
    result = invoke("angular", model_dirs["bert"], *TINY, "--lens-tokens", "4", "--out", out)
    assert_error(result, "--lens-tokens 4 does nothing with MODEL")
    assert "bert model, not a causal language model" in result.output and not out.exists()


def test_the_rule_for_nested_and_shared_groups_ends_the_cli_in_one_line(model_dirs, tmp_path):
    result = invoke("gradnorm", "--arch", "tiny", "--lr", "0.01", "--dataset", "builtin", "--out", tmp_path / "g")
    assert_error(result, "--lr 0.01 does nothing without --steps")
    result = invoke("prune", model_dirs["llama"], "--task", "arc_easy", "--tokens", "999", "--out", tmp_path / "p")
    assert_error(result, "--tokens 999 does nothing with --task arc_easy")
    assert not (tmp_path / "g").exists() and not (tmp_path / "p").exists()
