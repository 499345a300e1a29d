"""A transformers causal LM (already shortened) as a GGUF file with the tensor names, transforms and metadata that
llama.cpp's own converter (convert_hf_to_gguf.py) writes for it, in F32, F16 or BF16.

Per architecture (CONVERTERS), what differs between the two formats:
- LLaMA: llama.cpp's rotary embedding rotates adjacent pairs of a head's dimensions, transformers' rotates
  dimension i with i + d/2, so the q and k rows of each head are reordered (first half and second half
  interleaved); transformers' GGUF loader undoes it.
- Gemma 3: transformers' RMSNorm computes x * (1 + w), llama.cpp's x * w, so every norm weight is stored as w + 1
  (transformers' loader subtracts 1); the layers' attention kinds are written out as the sliding-window pattern
  array (one entry per block), since a cut moves the blocks off llama.cpp's implicit every-6th-is-full pattern.
- Qwen2: names only.
Names come from gguf's own tensor map (gguf.get_tensor_name_map), the map llama.cpp's converter uses. Matrices are
written in the chosen type; 1-D tensors (norms, biases) in F32, as llama.cpp's converter does. Nothing is quantized
below 16 bits.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import ArchitectureError, RunError, first_line
from layerprobe.models.gguf_vocab import tokenizer_fields
from layerprobe.models.gguf_write import BLOCK, MARK, PATTERN


@dataclass(frozen=True)
class Mapping:
    """How one transformers model_type becomes a GGUF architecture."""

    architecture: str  # general.architecture, llama.cpp's name
    permute_qk: bool = False  # reorder q/k rows for llama.cpp's rotary pairs
    norm_offset: float = 0.0  # added to every *norm.weight
    sliding: bool = False  # the layer kinds written as the sliding-window pattern array


CONVERTERS = {"llama": Mapping("llama", permute_qk=True), "qwen2": Mapping("qwen2"),
              "gemma3_text": Mapping("gemma3", norm_offset=1.0, sliding=True)}
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32}  # general.file_type: llama.cpp's ALL_F32, MOSTLY_F16, MOSTLY_BF16


@dataclass
class ConvertedGGUF:
    """What convert_to_gguf wrote."""

    architecture: str
    block_count: int
    tensor_types: dict[str, str] = field(default_factory=dict)  # GGUF name -> type written (F32, F16, BF16)
    pattern_written: list[bool] | None = None  # True = sliding window


def mapping_for(model_type: str | None) -> Mapping:
    """The GGUF mapping of a (text) config's model_type, or an ArchitectureError naming the supported ones."""
    if model_type not in CONVERTERS:
        raise ArchitectureError(f"--format gguf from a transformers model knows no GGUF mapping for '{model_type}' "
                                f"(it converts {', '.join(CONVERTERS)}): export --format hf, then convert that folder "
                                "with llama.cpp's convert_hf_to_gguf.py.")
    return CONVERTERS[model_type]


def _rope(config: Any) -> tuple[float, float | None, float | None]:
    """(full-attention rope theta, sliding-window layers' theta or None, linear scaling factor or None); a rope
    scaling llama.cpp reads from tensors or other keys (llama3, yarn, ...) is refused."""
    params = getattr(config, "rope_parameters", None) or {}
    full = params.get("full_attention", params) if isinstance(params, dict) else {}
    sliding = params.get("sliding_attention") if isinstance(params, dict) else None
    theta = full.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    kind = full.get("rope_type", "default")
    if kind not in ("default", "linear"):
        raise ArchitectureError(f"The model's rope scaling '{kind}' is not written by layerprobe's GGUF export (it "
                                "writes default and linear rope): export --format hf and convert with llama.cpp.")
    factor = float(full["factor"]) if kind == "linear" else None
    return float(theta), float(sliding["rope_theta"]) if sliding else None, factor


def _metadata(writer: Any, config: Any, mapping: Mapping, rows: int, kinds: list[str]) -> list[bool] | None:
    """The architecture's hyperparameters under llama.cpp's keys; the pattern written (or None)."""
    import gguf

    heads, hidden = int(config.num_attention_heads), int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    theta, theta_sliding, factor = _rope(config)
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(hidden)
    writer.add_block_count(len(kinds))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(getattr(config, "num_key_value_heads", None) or heads))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_freq_base(theta)
    writer.add_vocab_size(rows)
    if factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    if mapping.architecture == "llama":
        writer.add_rope_dimension_count(head_dim)
    if head_dim != hidden // heads or mapping.architecture == "gemma3":
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    sliding = [k == "sliding_attention" for k in kinds]
    if not mapping.sliding:
        if any(sliding):
            raise ArchitectureError(f"The model uses sliding-window attention, which llama.cpp's "
                                    f"{mapping.architecture} does not: export --format hf.")
        return None
    scalar = getattr(config, "query_pre_attn_scalar", head_dim)
    if scalar != head_dim:  # llama.cpp scales attention by 1/sqrt(head_dim) for Gemma 3 (27B aside)
        raise ArchitectureError(f"The model scales attention by 1/sqrt({scalar}), llama.cpp's Gemma 3 by "
                                f"1/sqrt(head_dim = {head_dim}): the GGUF would compute another model; export "
                                "--format hf.")
    window = getattr(config, "sliding_window", None)
    if window and any(sliding):
        writer.add_sliding_window(int(window))
        if theta_sliding is not None:
            writer.add_rope_freq_base_swa(theta_sliding)
        writer.add_key_value(f"{mapping.architecture}.{PATTERN}", sliding, gguf.GGUFValueType.ARRAY,
                             gguf.GGUFValueType.BOOL)
        return sliding
    return None


def _rotary_rows(weight: Any, heads: int) -> Any:
    """llama.cpp's row order for a q or k projection (or bias): within each head, rows i and i + d/2 adjacent."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _tensors(model: Any, config: Any, mapping: Mapping, blocks: int, gguf_type: str) -> Any:
    """(GGUF name, numpy array as written, GGMLQuantizationType) for every parameter of the (shortened) model."""
    import gguf
    import numpy as np

    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == mapping.architecture)
    names = gguf.get_tensor_name_map(arch, blocks)
    chosen = gguf.GGMLQuantizationType[gguf_type.upper()]
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    for hf_name, parameter in model.named_parameters():  # a tied lm_head is the embedding: listed once
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ArchitectureError(f"The parameter '{hf_name}' has no name in llama.cpp's {mapping.architecture} "
                                    "tensor map: export --format hf, then convert with llama.cpp.")
        data = parameter.detach().float().cpu().numpy()  # (out, in), the order GGUF's numpy view has
        if mapping.permute_qk and ".attn_q." in name:
            data = _rotary_rows(data, heads)
        elif mapping.permute_qk and ".attn_k." in name:
            data = _rotary_rows(data, kv_heads)
        if mapping.norm_offset and name.endswith("norm.weight"):
            data = data + np.float32(mapping.norm_offset)
        kind = gguf.GGMLQuantizationType.F32 if data.ndim <= 1 else chosen
        if kind == gguf.GGMLQuantizationType.F16:
            data = data.astype(np.float16)
        elif kind == gguf.GGMLQuantizationType.BF16:
            data = gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), kind)
        yield name, np.ascontiguousarray(data, dtype=np.float32) if kind == gguf.GGMLQuantizationType.F32 else data, kind


def convert_to_gguf(model: Any, tokenizer: Any, target: Path, gguf_type: str, kinds: list[str], record: dict,
                    name: str) -> ConvertedGGUF:
    """Write the (already shortened) `model` with its `tokenizer` to `target` in `gguf_type` (f32, f16, bf16);
    `kinds` is each kept block's kind (transformers' layer_types names), `record` the layerprobe.removal key."""
    import gguf

    from layerprobe.models.layers import text_config

    config = text_config(model)
    mapping = mapping_for(getattr(config, "model_type", None))
    if tokenizer is None:
        raise ArchitectureError("The model has no tokenizer, and llama.cpp needs one in the GGUF: save the model with "
                                "its tokenizer, or export --format hf.")
    rows = int(model.get_input_embeddings().num_embeddings)
    fields = tokenizer_fields(tokenizer, rows, mapping.architecture)
    writer = gguf.GGUFWriter(str(target), mapping.architecture)
    writer.add_name(name)
    writer.add_file_type(FILE_TYPES[gguf_type])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    pattern = _metadata(writer, config, mapping, rows, kinds)
    for key, value in fields.items():
        _add_field(writer, key, value)
    writer.add_key_value(MARK, json.dumps(record, sort_keys=True), gguf.GGUFValueType.STRING)
    types = {}
    for tensor_name, data, kind in _tensors(model, config, mapping, len(kinds), gguf_type):
        writer.add_tensor(tensor_name, data, raw_dtype=kind)  # BF16 comes as bytes: the writer infers its shape
        types[tensor_name] = kind.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return ConvertedGGUF(mapping.architecture, len(kinds), types, pattern)


def _add_field(writer: Any, key: str, value: Any) -> None:
    """One tokenizer field with GGUF's types for it (token types int32, scores float32, ids uint32)."""
    from gguf import GGUFValueType as V

    if isinstance(value, list):
        sub = (V.INT32 if key.endswith("token_type") else V.FLOAT32 if key.endswith("scores") else V.STRING)
        writer.add_key_value(key, value, V.ARRAY, sub)
    elif isinstance(value, bool):
        writer.add_key_value(key, value, V.BOOL)
    elif isinstance(value, int):
        writer.add_key_value(key, value, V.UINT32)
    else:
        writer.add_key_value(key, value, V.STRING)


def check_converted(target: Path, converted: ConvertedGGUF) -> dict:
    """Reopen the written file with gguf's reader: block_count, every per-layer array of the architecture as long
    as the blocks, blocks blk.0..K-1 without gaps, the header's tensor count, each tensor's type as written. Raises
    RunError naming the first mismatch; returns what was checked."""
    import gguf

    try:
        got = gguf.GGUFReader(str(target))
    except Exception as exc:  # the parser's own error types
        raise RunError(f"The written GGUF does not parse ({first_line(exc)}): not exported; please report this.") from None
    arch, count = converted.architecture, converted.block_count
    problems = []
    if got.fields["general.architecture"].contents() != arch:
        problems.append(f"general.architecture is not {arch}")
    if int(got.fields[f"{arch}.block_count"].contents()) != count:
        problems.append(f"{arch}.block_count is not {count}")
    arrays = [k for k, f in got.fields.items() if k.startswith(f"{arch}.") and f.types[0] == gguf.GGUFValueType.ARRAY]
    problems += [f"{k} has {len(got.fields[k].data)} entries for {count} blocks" for k in arrays
                 if len(got.fields[k].data) != count]
    if int(got.fields["GGUF.tensor_count"].contents()) != len(got.tensors):
        problems.append("the header's tensor count differs from the tensors listed")
    blocks = sorted({int(m.group(1)) for t in got.tensors if (m := BLOCK.match(t.name))})
    if blocks != list(range(count)):
        problems.append(f"the blocks are {blocks[:3]}...{blocks[-3:]}, not blk.0..{count - 1}")
    written = {t.name: t.tensor_type.name for t in got.tensors}
    if written != converted.tensor_types:
        problems.append(f"the tensors or their types differ from those written: "
                        f"{sorted(set(written.items()) ^ set(converted.tensor_types.items()))[:2]}")
    if problems:
        raise RunError(f"The written GGUF fails its check ({problems[0]}): not exported; please report this.")
    return {"block_count": count, "per_layer_arrays": arrays, "tensors": len(got.tensors),
            "alignment": got.alignment, "tensor_types": dict(Counter(written.values()))}


def type_changes(origin: Path, origin_blocks: list[int], written: dict[str, str]) -> dict:
    """Against the quantized GGUF the model was read from (`origin`; written block j was its block
    origin_blocks[j]): the tensors whose type differs, and their counts by 'from->to'."""
    import gguf

    source = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(origin)).tensors}
    changed, counts = [], Counter()
    for name, kind in sorted(written.items()):
        match = BLOCK.match(name)
        old = f"blk.{origin_blocks[int(match.group(1))]}.{match.group(2)}" if match else name
        before = source.get(old, source.get("token_embd.weight") if old == "output.weight" else None)
        if before is not None and before != kind:
            changed.append(name)
            counts[f"{before}->{kind}"] += 1
    return {"tensors_changed_type": changed, "tensor_types_changed": dict(sorted(counts.items()))}
