"""Typer option declarations reused by several commands (one definition, one help text)."""

from __future__ import annotations

import typer

Dtype = typer.Option("auto", "--dtype", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16.")
Device = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N.")
Revision = typer.Option(None, "--revision", help="Hub branch, tag or commit of MODEL.")
TrustRemoteCode = typer.Option(False, "--trust-remote-code", help="Run the checkpoint's own code (only if you trust it).")
LayersPath = typer.Option(None, "--layers-path", help="Dotted path of the block ModuleList, e.g. model.layers.")
Dataset = typer.Option(
    "c4", "--dataset", help="c4 (hub, streamed), builtin (offline English), hub name[:config][:split], or a "
    ".txt/.jsonl/.parquet file or save_to_disk folder."
)
TextField = typer.Option("text", "--text-field", help="Column or JSON field holding the text.")
Tokens = typer.Option(262144, "--tokens", help="Exact number of token positions to process.")
SeqLen = typer.Option(1024, "--seq-len", help="Packed sequence length (capped at the model's maximum).")
BatchSize = typer.Option(8, "--batch-size", help="Sequences per forward pass.")
Overwrite = typer.Option(False, "--overwrite", help="Replace an existing run folder (default: new timestamped folder).")
Formats = typer.Option("png", "--format", help="Plot formats, comma-separated: png, svg, pdf.")
