"""angular.csv against an independent naive computation: HF hidden states, per-token arccos in float64."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from layerprobe.commands.angular.run import run_angular
from layerprobe.config import AngularConfig, DataOptions, ModelOptions
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import batches
from layerprobe.metrics.angular import AngularAccumulator

from .conftest import FINAL_NORM


def naive_reference(folder, final_norm, corpus, tokens, seq_len, batch_size, last_only=False, **load):
    """Block inputs from HF's own output_hidden_states (final norm replaced by identity), naive loops.
    `load`: more from_pretrained keywords (gguf_file=...)."""
    model = transformers.AutoModel.from_pretrained(folder, dtype=torch.float32, **load).eval()
    if final_norm:
        setattr(model, final_norm, torch.nn.Identity())
    tok = transformers.AutoTokenizer.from_pretrained(folder, **load)
    vectors = []  # per token: (K, d) float64
    for batch in batches(open_corpus(corpus).texts(), tok, seq_len, batch_size, tokens):
        with torch.no_grad():
            hidden = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           output_hidden_states=True).hidden_states
        states = torch.stack(hidden, dim=2).double().numpy()  # (batch, seq, K, d)
        for b in range(states.shape[0]):
            positions = [states.shape[1] - 1] if last_only else range(states.shape[1])
            for t in positions:
                vectors.append(states[b, t])
    num = vectors[0].shape[0]
    total = np.zeros((num, num))
    for v in vectors:
        for i in range(num):
            for j in range(num):
                c = float(v[i] @ v[j]) / (np.linalg.norm(v[i]) * np.linalg.norm(v[j]))
                total[i, j] += math.acos(min(1.0, max(-1.0, c))) / math.pi
    return total / len(vectors), len(vectors)


def config_for(folder, tmp_path, corpus, tokens=300, seq_len=48, batch_size=3, positions="all"):
    return AngularConfig(
        model=ModelOptions(str(folder), dtype="float32", device="cpu"),
        data=DataOptions(str(corpus), tokens=tokens, seq_len=seq_len, batch_size=batch_size),
        positions=positions,
        out=str(tmp_path / "run"),
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "bert"])
def test_angular_matches_naive(arch, model_dirs, corpus_file, tmp_path):
    run = run_angular(config_for(model_dirs[arch], tmp_path, corpus_file))
    expected, count = naive_reference(model_dirs[arch], FINAL_NORM[arch], str(corpus_file), 300, 48, 3)
    frame = pd.read_csv(run.folder / "angular.csv")
    assert list(frame.columns[:4]) == ["layer", "n", "distance", "tokens"]
    assert count == 300 and (frame["tokens"] == 300).all()
    num_layers = 4
    assert len(frame) == num_layers * (num_layers + 1) // 2
    for row in frame.itertuples():
        assert row.distance == pytest.approx(expected[row.layer, row.layer + row.n], abs=1e-9)
    assert ((frame.distance >= 0) & (frame.distance <= 1)).all()


def test_minilm_real_weights_match_naive(minilm_dir, corpus_file, tmp_path):
    run = run_angular(config_for(minilm_dir, tmp_path, corpus_file, tokens=200, seq_len=64, batch_size=2))
    expected, _ = naive_reference(minilm_dir, None, str(corpus_file), 200, 64, 2)
    frame = pd.read_csv(run.folder / "angular.csv")
    got = {(r.layer, r.n): r.distance for r in frame.itertuples()}
    assert len(got) == 21
    for (layer, n), value in got.items():
        assert value == pytest.approx(expected[layer, layer + n], abs=1e-9)
    layers = pd.read_csv(run.folder / "layers.csv")
    assert layers["cos_input"].iloc[0] == pytest.approx(1.0)
    assert layers["distance_next"].iloc[:6].tolist() == pytest.approx([expected[i, i + 1] for i in range(6)], abs=1e-9)
    for name in ("heatmap.png", "summary.json", "manifest.json"):
        assert (run.folder / name).is_file()


def test_last_positions_match_naive(model_dirs, corpus_file, tmp_path):
    run = run_angular(config_for(model_dirs["llama"], tmp_path, corpus_file, tokens=192, seq_len=32, positions="last"))
    expected, count = naive_reference(model_dirs["llama"], "norm", str(corpus_file), 192, 32, 3, last_only=True)
    assert run.summary["measured_positions"] == count == 6
    frame = pd.read_csv(run.folder / "angular.csv")
    for row in frame.itertuples():
        assert row.distance == pytest.approx(expected[row.layer, row.layer + row.n], abs=1e-9)


def test_accumulator_properties_and_layer_stats():
    """Hand-built vectors: orthogonal -> 0.5, opposite -> 1, identical -> 0; norms and variances by hand."""
    e = torch.eye(3, dtype=torch.float64)
    x0 = torch.stack([e[0], e[0] * 2])  # two tokens
    x1 = torch.stack([e[1], e[0] * 3])
    x2 = torch.stack([-e[0], -e[0]])
    states = [s.view(1, 2, 3) for s in (x0, x1, x2)]
    acc = AngularAccumulator(3)
    acc.update(states)
    stats = acc.result()
    d = stats.distance.numpy()
    assert d[0, 1] == pytest.approx((0.5 + 0.0) / 2)
    assert d[0, 2] == pytest.approx(1.0)
    assert d[1, 2] == pytest.approx((0.5 + 1.0) / 2)
    assert np.allclose(d, d.T) and np.allclose(np.diag(d), 0)
    assert stats.norm.tolist() == pytest.approx([1.5, 2.0, 1.0])
    # population variance of (1,0,0) is 2/9, of (2,0,0) is 8/9
    assert stats.variance[0].item() == pytest.approx((2 / 9 + 8 / 9) / 2)
    assert stats.cos_input.tolist() == pytest.approx([1.0, 0.5, -1.0])
    assert stats.tokens == 2


def test_nearly_parallel_vectors_do_not_nan():
    x = torch.randn(1, 5, 64, dtype=torch.float32)
    acc = AngularAccumulator(2)
    acc.update([x, x * 1.0000001])
    assert torch.isfinite(acc.result().distance).all()
    assert acc.result().distance[0, 1].item() < 1e-3


def test_layers_csv_effective_rank_matches_numpy(model_dirs, corpus_file, tmp_path):
    """effective_rank of x_l over the measured tokens (all 300 here, < the 2048 sample) vs numpy's SVD."""
    run = run_angular(config_for(model_dirs["qwen2"], tmp_path, corpus_file))
    model = transformers.AutoModel.from_pretrained(model_dirs["qwen2"], dtype=torch.float32).eval()
    model.norm = torch.nn.Identity()
    tok = transformers.AutoTokenizer.from_pretrained(model_dirs["qwen2"])
    per_layer = [[] for _ in range(5)]
    for batch in batches(open_corpus(str(corpus_file)).texts(), tok, 48, 3, 300):
        with torch.no_grad():
            hidden = model(input_ids=batch.input_ids, output_hidden_states=True).hidden_states
        for layer, h in enumerate(hidden):
            per_layer[layer].append(h.reshape(-1, h.shape[-1]).double().numpy())
    layers = pd.read_csv(run.folder / "layers.csv")
    for layer in range(5):
        cloud = np.concatenate(per_layer[layer])
        s = np.linalg.svd(cloud - cloud.mean(0), compute_uv=False)
        p = s / s.sum()
        p = p[p > 0]
        assert layers["effective_rank"].iloc[layer] == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-5)
    assert run.summary["rank_tokens"] == 300
