"""What angular and prune share: the cheap checks, then the loaded model, its blocks, tokenizer and corpus."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerprobe.config import DataOptions, ModelOptions
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import check_sizes, sequence_limit
from layerprobe.models.layers import BlockStack, find_blocks
from layerprobe.models.load import LoadedModel, load_model, locate


@dataclass
class Probe:
    """A model ready to be measured on a corpus."""

    loaded: LoadedModel
    stack: BlockStack  # the blocks whose inputs are measured or removed
    corpus: Any  # data.corpora.Corpus, None when the command needs no probe corpus (lm-eval, squad)
    seq_len: int  # the packed sequence length in use (the asked one, capped at the model's maximum)
    warnings: list[str] = field(default_factory=list)

    @property
    def model(self) -> Any:
        return self.loaded.model

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def device(self) -> str:
        return self.loaded.device

    def facts(self) -> dict:
        """What summary.json and manifest.json say about the model."""
        loaded = self.loaded
        return {
            "model": loaded.spec,
            "model_source": loaded.source,
            "model_path": str(loaded.path) if loaded.path else None,
            "revision": loaded.revision,
            "weights": loaded.fingerprint(),
            "gguf": loaded.gguf,
            "architecture": type(loaded.model).__name__,
            "layers_path": self.stack.path,
            "num_layers": len(self.stack),
            "dtype": loaded.dtype,
            "device": loaded.device,
        }


def open_probe(model: ModelOptions, data: DataOptions, head: str = "base", need_corpus: bool = True) -> Probe:
    """The cheap checks first (sizes, a local model folder, then the corpus), then model, blocks and seq-len."""
    check_sizes(data.tokens, data.seq_len, data.batch_size)
    locate(model.model, model.gguf_file)  # a missing or broken folder is named before any dataset problem
    corpus = open_corpus(data.dataset, data.text_field) if need_corpus else None
    loaded = load_model(model.model, head=head, dtype=model.dtype, device=model.device, revision=model.revision,
                        trust_remote_code=model.trust_remote_code, device_map=model.device_map, offload=model.offload,
                        gguf_file=model.gguf_file, cache=model.cache)
    stack = find_blocks(loaded.model, model.layers_path)
    warnings = []
    seq_len = data.seq_len
    limit = sequence_limit(loaded.model, loaded.tokenizer)
    if need_corpus and limit is not None and seq_len > limit[0]:
        warnings.append(f"--seq-len {seq_len} exceeds {limit[1]}; using {limit[0]}.")
        seq_len = limit[0]
    return Probe(loaded, stack, corpus, seq_len, warnings)
