"""Typer option declarations reused by several commands (one definition, one help text)."""

from __future__ import annotations

import typer

Device = typer.Option("auto", "--device", show_default=False, help="auto (default), cpu, cuda or cuda:N.")
Revision = typer.Option(None, "--revision", help="Hub branch, tag or commit of MODEL.")
TrustRemoteCode = typer.Option(False, "--trust-remote-code", help="Run the checkpoint's own code (only if you trust it).")
LayersPath = typer.Option(None, "--layers-path", help="Dotted path of the block ModuleList, e.g. model.layers.")
Stack = typer.Option(None, "--stack", help="Which block stack to measure in a model with several: encoder or decoder "
                     "(T5, BART), language or vision (LLaVA, Qwen2-VL); default the language model, or the encoder.")
Quantize = typer.Option(None, "--quantize", help="Load the weights quantized with bitsandbytes: 4bit or 8bit (CUDA "
                        "only). Checkpoints saved quantized (bitsandbytes, GPTQ, AWQ) load as they are.")
Dataset = typer.Option(
    "c4", "--dataset", help="c4 (hub, streamed), builtin (offline English), hub name[:config][:split], or a "
    ".txt/.jsonl/.parquet file or save_to_disk folder."
)
TextField = typer.Option("text", "--text-field", show_default=False, help="Column or JSON field holding the text (default text).")
BatchSize = typer.Option(8, "--batch-size", help="Sequences per forward pass.")
Overwrite = typer.Option(False, "--overwrite", help="Replace an existing run folder (default: new timestamped folder).")
Formats = typer.Option("png", "--format", show_default=False, help="Plot formats, comma-separated: png (default), svg, pdf.")
DeviceMap = typer.Option(None, "--device-map", help="Spread the model over the visible GPUs with accelerate: auto, "
                         "balanced, sequential, or a JSON object/file of module name -> device (0, 'cpu', 'disk').")
Offload = typer.Option("none", "--offload", show_default=False, help="With --device-map: none (default: GPUs only; too big is an error), cpu (spill "
                       "to RAM) or disk:FOLDER (and to FOLDER).")
GGUFFile = typer.Option(None, "--gguf-file", help="The .gguf file inside MODEL (a folder or hub repo); MODEL may also "
                        "be a .gguf file itself. Dequantized to --dtype.")
Cache = typer.Option(True, "--cache/--no-cache", show_default=False, help="Keep a GGUF's dequantized weights in the user's cache "
                     "($XDG_CACHE_HOME/layerprobe): later loads take seconds (default --cache).")
