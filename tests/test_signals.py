"""The cheap signals of layers.csv against naive references: Block Influence per token from HF's hidden states,
the logit lens from HF's hidden states pushed through the model's final norm and head by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import transformers

from layerprobe.commands.angular.run import LENS_STAGE, run_angular
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches

from .helpers import invoke
from .test_angular import config_for


def hidden_states(folder, corpus, tokens, seq_len, batch_size):
    """Per batch: the causal LM's raw block inputs x_0..x_{L-1}, the last block's raw output x_L (a hook), logits."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    last = {}
    model.model.layers[-1].register_forward_hook(lambda m, a, out: last.update(x=out[0] if isinstance(out, tuple) else out))
    for batch in batches(open_corpus(corpus).texts(), tok, seq_len, batch_size, tokens):
        with torch.no_grad():
            out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True)
        yield model, [*out.hidden_states[:-1], last["x"]], out.logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_block_influence_and_logit_lens_match_naive(arch, model_dirs, corpus_file, tmp_path):
    config = config_for(model_dirs[arch], tmp_path, corpus_file, tokens=240, seq_len=40, batch_size=3)
    config.lens_tokens = 100  # fewer than the 240 measured: the lens reads the first 100 positions
    run = run_angular(config)
    layers = pd.read_csv(run.folder / "layers.csv")
    num = 4
    cos_sum, kl_sum, positions, lens_positions = [0.0] * num, [0.0] * num, 0, 0
    for model, states, logits in hidden_states(model_dirs[arch], str(corpus_file), 240, 40, 3):
        flat = [s.reshape(-1, s.shape[-1]).double() for s in states]
        final = torch.log_softmax(logits.reshape(-1, logits.shape[-1]).double(), -1)
        for t in range(flat[0].shape[0]):
            for layer in range(num):
                a, b = flat[layer][t], flat[layer + 1][t]
                cos_sum[layer] += float(a @ b) / (float(a.norm()) * float(b.norm()))
            if lens_positions < 100:
                for layer in range(num):
                    with torch.no_grad():  # the model's own final norm and head, by hand
                        lens = model.lm_head(model.model.norm(flat[layer][t].float())).double()
                    log_q = torch.log_softmax(lens, -1)
                    kl_sum[layer] += float((final[t].exp() * (final[t] - log_q)).sum())
                lens_positions += 1
            positions += 1
    assert positions == 240 and run.summary["logit_lens_tokens"] == 100
    for layer in range(num):
        assert layers["block_influence"][layer] == pytest.approx(1 - cos_sum[layer] / positions, abs=1e-9)
        assert layers["logit_lens_kl"][layer] == pytest.approx(kl_sum[layer] / 100, rel=1e-4, abs=1e-6)
    assert layers["logit_lens_kl"][num] == pytest.approx(0.0, abs=1e-9)  # the output read by the head is the output
    assert math.isnan(layers["block_influence"][num])


def test_encoder_has_block_influence_and_no_lens(model_dirs, corpus_file, tmp_path):
    run = run_angular(config_for(model_dirs["bert"], tmp_path, corpus_file, tokens=120, seq_len=40, batch_size=3))
    layers = pd.read_csv(run.folder / "layers.csv")
    assert layers["block_influence"][:4].between(0, 2).all()
    assert layers["logit_lens_kl"].isna().all() and run.summary["logit_lens_tokens"] == 0


def test_prune_reports_spearman_of_each_cheap_signal(model_dirs, tmp_path):
    """With an angular run beside it, a prune run correlates d(l, 1), Block Influence and logit-lens KL with dP:
    checked against scipy's spearmanr of the two CSVs."""
    from scipy.stats import spearmanr

    folder = model_dirs["llama"]
    data = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "4"]
    assert invoke("angular", str(folder), *data, "--out", str(tmp_path / "angular")).exit_code == 0
    result = invoke("prune", str(folder), "--task", "kl", *data, "--out", str(tmp_path / "prune-kl"))
    assert result.exit_code == 0, result.output
    import json

    summary = json.loads((tmp_path / "prune-kl" / "summary.json").read_text())
    prune = pd.read_csv(tmp_path / "prune-kl" / "prune.csv").sort_values("layer")
    layers = pd.read_csv(tmp_path / "angular" / "layers.csv")
    expected = {"angular": layers["distance_next"][:4], "block_influence": layers["block_influence"][:4],
                "logit_lens_kl": layers["logit_lens_kl"][:4]}
    assert set(summary["spearman_delta"]) == set(expected)
    for name, values in expected.items():
        assert summary["spearman_delta"][name] == pytest.approx(spearmanr(values, prune["delta"]).statistic, abs=1e-12)
    assert summary["spearman_angular_delta"] == summary["spearman_delta"]["angular"]


def test_an_angular_run_of_another_model_beside_is_passed_over(model_dirs, tmp_path):
    data = ["--dataset", "builtin", "--tokens", "128", "--seq-len", "32", "--batch-size", "4"]
    assert invoke("angular", str(model_dirs["gpt2"]), *data, "--out", str(tmp_path / "angular")).exit_code == 0
    result = invoke("prune", str(model_dirs["llama"]), "--task", "kl", *data,
                    "--out", str(tmp_path / "prune-kl"))
    assert result.exit_code == 0, result.output
    import json

    summary = json.loads((tmp_path / "prune-kl" / "summary.json").read_text())
    assert summary["angular_run"] is None and summary["spearman_delta"] == {}


def test_default_lens_positions_shrink_with_the_vocabulary():
    from layerprobe.metrics.lens import default_lens_tokens

    # min(512, 512 x 32768 / V, tokens / 64), at least 16: by hand
    many = 262144
    assert [default_lens_tokens(v, many) for v in (1000, 32000, 32768, 49152, 262144, 10**7)] == [512, 512, 512, 341,
                                                                                                   64, 16]
    assert [default_lens_tokens(262144, t) for t in (100, 1024, 2048, 4096, 8192)] == [16, 16, 32, 64, 64]
    assert default_lens_tokens(49152, 8192) == 128


def test_lens_has_its_own_progress_stage_and_the_default_follows_the_vocabulary(model_dirs, corpus_file, tmp_path):
    """The bar names the phase it is in: the lens reports "logit lens (positions)", up to its limit; left unset,
    --lens-tokens is min(512, 512 x 32768 / vocabulary, tokens / 64), at least 16 (here: 16 of the 240)."""
    config = config_for(model_dirs["llama"], tmp_path, corpus_file, tokens=240, seq_len=40, batch_size=3)
    assert config.lens_tokens is None
    vocab = transformers.AutoConfig.from_pretrained(model_dirs["llama"]).vocab_size
    seen = []
    run = run_angular(config, lambda stage, done, total: seen.append((stage, done, total)))
    expected = max(16, min(512, 512 * 32768 // vocab, 240 // 64))
    assert expected == 16 and run.summary["logit_lens_tokens"] == expected
    lens = [(done, total) for stage, done, total in seen if stage == LENS_STAGE]
    assert lens and all(total == expected for _, total in lens)
    assert [d for d, _ in lens] == sorted(d for d, _ in lens) and lens[-1][0] == expected
    assert {stage for stage, *_ in seen} == {"tokens", LENS_STAGE} and LENS_STAGE == "logit lens (positions)"
