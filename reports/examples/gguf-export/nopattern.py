"""The control: an export's model.gguf copied without its <arch>.attention.sliding_window_pattern key (llama.cpp
then applies its implicit pattern to the renumbered blocks), compared with transformers on the HF export as
bench/gguf_llamacpp.py compares the export itself.

    python reports/examples/gguf-export/nopattern.py gemma3-16
"""
import json
import sys
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import gguf_llamacpp as bench  # noqa: E402

export = Path(sys.argv[1])
reader = gguf.GGUFReader(str(export / "model.gguf"))
architecture = reader.fields["general.architecture"].contents()
target = export.with_name(export.name + "-nopattern.gguf")
writer = gguf.GGUFWriter(str(target), architecture)
for key, field in reader.fields.items():
    if key.startswith("GGUF.") or key in ("general.architecture", f"{architecture}.attention.sliding_window_pattern"):
        continue
    kind = gguf.GGUFValueType(field.types[0])
    writer.add_key_value(key, field.contents(), kind,
                         gguf.GGUFValueType(field.types[-1]) if kind == gguf.GGUFValueType.ARRAY else None)
for tensor in reader.tensors:
    writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type,
                      raw_shape=None if tensor.data.dtype == "uint8" else tensor.data.shape)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
print(json.dumps(bench.compare(target, export, bench.token_ids(export))))
