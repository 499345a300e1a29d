"""What angular and prune share: the cheap checks, then the loaded model, its blocks, tokenizer and corpus."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerprobe.config import DataOptions, ModelOptions
from layerprobe.data.corpora import open_corpus
from layerprobe.data.packing import check_sizes, sequence_limit
from layerprobe.models.layers import BlockStack, find_blocks, find_stacks, layer_kinds, stack_name
from layerprobe.errors import ArchitectureError, TaskError, all_checks
from layerprobe.models.load import LoadedModel, check_hub_reachable, checkpoint_architecture, load_model, locate
from layerprobe.runs.paths import portable_path


@dataclass
class Probe:
    """A model ready to be measured on a corpus."""

    loaded: LoadedModel
    stack: BlockStack  # the blocks whose inputs are measured or removed
    corpus: Any  # data.corpora.Corpus, None when the command needs no probe corpus (lm-eval, squad)
    seq_len: int  # the packed sequence length in use (the asked one, capped at the model's maximum)
    warnings: list[str] = field(default_factory=list)
    _placement: dict | None = field(default=None, repr=False)

    @property
    def model(self) -> Any:
        return self.loaded.model

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def device(self) -> str:
        return self.loaded.device

    def identity(self, config: Any, **came_to: Any) -> dict:
        """What a --resume must match: every setting of `config` marked as changing the numbers (settings.identity),
        and what those whose Mark names a resolved key came to on this machine (settings.resolved_identity): the
        dtype, device kind, sequence length, the weights' fingerprint, the block stack of a model with several,
        quantized weights, and what the command passes (`came_to`: curve's k_max, heal's removed blocks, ...)."""
        from layerprobe.settings import identity, resolved_identity

        loaded = self.loaded
        came_to = {"dtype": loaded.dtype, "device_kind": loaded.device.split(":")[0], "seq_len": self.seq_len,
                   "weights": loaded.fingerprint(), "stack": self.stack_name(), "quantization": loaded.quantization,
                   **came_to}
        return identity(config) | resolved_identity(config, came_to)

    def placement(self) -> dict:
        """Where the blocks normalize (models/norms.py: pre, post, peri, mix or unknown), read once from a forward."""
        if self._placement is None:
            from layerprobe.models.norms import block_placements, model_placement

            try:
                per_block = block_placements(self.model, self.stack)
            except Exception:  # a model whose plain forward needs more than token ids (images): not read
                per_block = ["unknown"] * len(self.stack)
            self._placement = {"placement": model_placement(per_block), "placement_by_layer": per_block}
        return self._placement

    def stack_name(self) -> str | None:
        """encoder, decoder, language or vision in a model with several stacks; None in a model with one."""
        return stack_name(self.stack.path) if len(find_stacks(self.model)) > 1 else None

    def facts(self) -> dict:
        """What summary.json and manifest.json say about the model."""
        loaded = self.loaded
        return {
            "model": loaded.spec,
            "model_source": loaded.source,
            "model_path": portable_path(loaded.path),
            "revision": loaded.revision,
            "weights": loaded.fingerprint(),
            "gguf": {**loaded.gguf, "file": portable_path(loaded.gguf.get("file"))} if loaded.gguf else loaded.gguf,
            "quantization": loaded.quantization,
            "architecture": type(loaded.model).__name__,
            "layers_path": self.stack.path,
            "stack": self.stack_name(),
            "num_layers": len(self.stack),
            "layer_types": layer_kinds(self.model, self.stack),
            **self.placement(),
            "dtype": loaded.dtype,
            "device": loaded.device,
        }


def _check_model(model: ModelOptions, head: str) -> None:
    """What can be told about the model without loading it: a missing or broken folder, a hub id while the hub is
    offline and not cached, a question-answering task on a checkpoint saved without a QA head."""
    source, _ = locate(model.model, model.gguf_file)
    check_hub_reachable(model.model, source, model.revision)  # seconds, where the hub libraries retry for 30 s
    if head == "qa":
        name = checkpoint_architecture(model.model, model.revision, model.trust_remote_code, model.gguf_file)
        if name and not name.endswith("ForQuestionAnswering"):
            raise TaskError(f"squad needs a trained question-answering head and '{model.model}' was saved as {name} "
                            "(no QA head): fine-tune it on SQuAD or pass a QA checkpoint.")


def _default_stack(model: Any, head: str) -> str | None:
    """An encoder-decoder measured by its final hidden state (angular, drift) defaults to the encoder; with a
    language-model head (kl, ppl, lm-eval) the stack is the user's choice (find_blocks lists them)."""
    stacks = find_stacks(model)
    if getattr(model.config, "is_encoder_decoder", False) and head == "base" and "encoder" in stacks:
        return "encoder"
    return None


def declared_layers(model: ModelOptions) -> int | None:
    """The block count the checkpoint's config declares, read in a moment without its weights, so a layer range is
    refused before the load; None where the blocks measured may be another stack (--layers-path, --stack) or the
    config does not say."""
    from layerprobe.models.load import peek_num_layers

    if model.layers_path or model.stack or not model.model:
        return None
    return peek_num_layers(model.model, model.revision, model.gguf_file)


def refuse_ranges_early(model: ModelOptions, remove: str | None = None, layers: str | None = None,
                        block: int = 1) -> None:
    """--remove, --layers and --block against the block count the config declares: a range outside the model is
    refused in a moment, before torch is imported or the weights load (the CLI calls this first; the commands again,
    for library calls)."""
    from layerprobe.evaluation.variants import parse_layers, sweep
    from layerprobe.removal import parse_remove

    declared = declared_layers(model)
    if declared is None:
        return
    if remove is not None:
        parse_remove(remove, declared)
    if layers is not None or block != 1:
        sweep(declared, block, parse_layers(layers, declared))


def preflight(model: ModelOptions, data: DataOptions, head: str = "base", need_corpus: bool = True,
              more: tuple = ()) -> list:
    """Every check that needs no model (sizes, the model's source and head, the corpus, and `more` of the caller),
    all run, every problem reported at once. Returns [corpus, *results of more]."""
    results = all_checks(lambda: check_sizes(data.tokens, data.seq_len, data.batch_size),
                         lambda: _check_model(model, head),
                         lambda: open_corpus(data.dataset, data.text_field) if need_corpus else None, *more)
    return results[2:]


def open_probe(model: ModelOptions, data: DataOptions, head: str = "base", need_corpus: bool = True,
               checked: tuple | None = None) -> Probe:
    """The cheap checks first, then model, blocks and seq-len. checked: (corpus,) when the caller ran preflight
    itself (with checks of its own), so nothing is checked twice."""
    corpus = checked[0] if checked is not None else preflight(model, data, head, need_corpus)[0]
    loaded = load_model(model.model, head=head, dtype=model.dtype, device=model.device, revision=model.revision,
                        trust_remote_code=model.trust_remote_code, device_map=model.device_map, offload=model.offload,
                        gguf_file=model.gguf_file, cache=model.cache, quantize=model.quantize)
    stack = find_blocks(loaded.model, model.layers_path, model.stack or _default_stack(loaded.model, head))
    if stack_name(stack.path) == "vision" and len(find_stacks(loaded.model)) > 1:
        raise ArchitectureError(f"--stack vision: the vision tower ({stack.path}) runs on images and layerprobe feeds "
                                "text only: measure --stack language.")
    warnings = []
    seq_len = data.seq_len
    limit = sequence_limit(loaded.model, loaded.tokenizer)
    if need_corpus and limit is not None and seq_len > limit[0]:
        if data.seq_len_given:  # the default 1024 is capped without a word: only what the user asked for is news
            warnings.append(f"--seq-len {seq_len} exceeds {limit[1]}; using {limit[0]}.")
        seq_len = limit[0]
    return Probe(loaded, stack, corpus, seq_len, warnings)
