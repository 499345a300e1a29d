"""The library API is what the CLI runs: `from layerprobe import ...`, typed settings in, DataFrames out."""

from __future__ import annotations


import pytest
import torch


def test_the_api_measures_and_reads_back(model_dirs, corpus_file, tmp_path):
    """angular through the public names, against a naive float64 arccos of HF's own hidden states (block inputs
    0..L-1) on the same packed tokens; the run reads back with load_run; bad input raises LayerprobeError."""
    import transformers

    import layerprobe
    from layerprobe import AngularConfig, DataOptions, LayerprobeError, ModelOptions, angular, load_run
    from layerprobe.data.corpora import open_corpus
    from tests.helpers import hf_next_distances

    folder = model_dirs["llama"]
    config = AngularConfig(model=ModelOptions(str(folder), dtype="float32", device="cpu"),
                           data=DataOptions(str(corpus_file), tokens=128, seq_len=32, batch_size=2), out=str(tmp_path / "run"),
                           lens_tokens=0)
    run = angular(config)
    assert run.folder == tmp_path / "run" and set(run.tables) == {"angular", "layers"}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    want = hf_next_distances(model, tok, open_corpus(str(corpus_file)).texts(), 32, 2, 128, 3)
    table = run.angular
    for layer in range(3):
        got = float(table[(table["layer"] == layer) & (table["n"] == 1)]["distance"].iloc[0])
        assert got == pytest.approx(want[layer], abs=1e-6)
    back = load_run(run.folder)
    assert back.command == "angular" and back.summary["schema_version"] == 1
    assert back.tables["angular"].equals(run.angular)
    with pytest.raises(LayerprobeError):
        angular(AngularConfig(model=ModelOptions(str(tmp_path / "missing")), data=config.data))
    assert {"angular", "prune", "curve", "gradnorm", "export", "heal", "toy", "load_run", "LayerprobeError"} <= set(dir(layerprobe))


def test_no_hook_outlives_the_command_that_loaded_the_model(tokenizer, corpus_file, tmp_path):
    """An encoder-decoder gets a decoder-input hook while it is measured; when the command returns it is gone."""
    import transformers

    from layerprobe import AngularConfig, DataOptions, ModelOptions, angular, scoped
    from layerprobe.models.load import load_model

    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                   d_kv=8, decoder_start_token_id=0, pad_token_id=0)
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5")
    tokenizer.save_pretrained(tmp_path / "t5")
    loaded = load_model(str(tmp_path / "t5"), dtype="float32", device="cpu")
    assert len(scoped._live) == 1 and loaded.model._forward_pre_hooks  # a bare load keeps it: the caller's model
    scoped.release()
    assert not loaded.model._forward_pre_hooks
    angular(AngularConfig(model=ModelOptions(str(tmp_path / "t5"), dtype="float32", device="cpu", stack="encoder"),
                          data=DataOptions(str(corpus_file), tokens=64, seq_len=16, batch_size=2), out=str(tmp_path / "run"),
                          lens_tokens=0))
    assert scoped._live == []
