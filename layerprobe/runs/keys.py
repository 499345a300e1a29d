"""summary.json keys, declared once: `Key` (name, types, meaning, whether every run writes it, whether it may be
null), the groups of keys several commands share (RUN, MODEL, CORPUS), and SUMMARIES, each command's keys, filled
by `layerprobe.commands.register` from the commands' records (a command's own keys live in its package).

runs/schema.py checks a summary against its command's keys and renders docs/outputs.md from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.registry import Registry


@dataclass(frozen=True)
class Key:
    name: str
    types: tuple[type, ...]  # what the value may be (None is allowed where `optional`)
    meaning: str
    required: bool = True  # False: written only in some runs (a GPU, an lm-eval task, a shard)
    optional: bool = False  # the value may be null


# what a Key's value may be
TEXT, INTEGER, NUMBER, FLAG, LIST, MAPPING = (str,), (int,), (int, float), (bool,), (list,), (dict,)
S, I, F, B, L, D = TEXT, INTEGER, NUMBER, FLAG, LIST, MAPPING  # their old one-letter names, kept for older records

MODEL = (  # what the loaded model was: commands/probe.Probe.facts
    Key("model", TEXT, "MODEL as given (hub id, folder, .gguf file, embedded name)"),
    Key("model_source", TEXT, "embedded, local, hub or gguf"),
    Key("model_path", TEXT, "the local folder the weights were read from", optional=True),
    Key("revision", TEXT, "hub revision", optional=True),
    Key("weights", TEXT, "fingerprint of the weights: a GGUF's sha256, or sha256 over each weight file's name, size, "
        "first and last MiB", optional=True),
    Key("gguf", MAPPING, "a GGUF source: file, sha256, architecture, quantization, dequantized_to", optional=True),
    Key("quantization", MAPPING, "quantized weights: method, bits, on_load", optional=True),
    Key("architecture", TEXT, "the transformers class measured"),
    Key("layers_path", TEXT, "dotted path of the block list measured"),
    Key("stack", TEXT, "encoder, decoder, language or vision in a model with several stacks", optional=True),
    Key("num_layers", INTEGER, "blocks in the stack"),
    Key("layer_types", LIST, "the kind of each block (attention, mamba, sliding_attention, ...)", optional=True),
    Key("placement", TEXT, "where the blocks normalize, read from one forward: pre, post, peri (sandwich), mix or "
        "unknown", required=False),
    Key("placement_by_layer", LIST, "the placement of each block", required=False),
    Key("dtype", TEXT, "the dtype the model ran in"),
    Key("device", TEXT, "the device the model ran on"),
)
RUN = (
    Key("command", TEXT, "the command that wrote the folder"),
    Key("schema_version", INTEGER, "version of this record"),
    Key("seconds", NUMBER, "working time, interrupted parts included"),
    Key("warnings", LIST, "what the run warned about, one sentence each"),
)
CORPUS = (
    Key("dataset", TEXT, "the probe corpus, as described to a reader"),
    Key("tokens", INTEGER, "token positions processed", optional=True),
    Key("seq_len", INTEGER, "packed sequence length in use"),
)

SUMMARIES: dict[str, tuple[Key, ...]] = Registry("summary record")  # command -> its keys, in registration order (docs/outputs.md's order)
