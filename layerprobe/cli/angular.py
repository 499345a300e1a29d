"""`layerprobe angular MODEL`: angular distance between block inputs, heatmap + CSV."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli import options as o
from layerprobe.cli.common import call, out, parse_formats, progress_bar, show_warnings
from layerprobe.config import AngularConfig, DataOptions, ModelOptions


def angular(
    model: str = typer.Argument(None, help="Hub id, local folder, .gguf file, 'minilm' (embedded all-MiniLM-L6-v2, the "
                                "default unless [tool.layerprobe] names one) or 'smollm2' (embedded SmolLM2-135M GGUF)."),
    dataset: str = typer.Option(None, "--dataset", help="c4 (hub, streamed; default), builtin (offline English), hub "
                                "name[:config][:split], or a .txt/.jsonl/.parquet file or save_to_disk folder."),
    text_field: str = o.TextField,
    tokens: int = typer.Option(None, "--tokens", help="Exact number of token positions to process (default 262144)."),
    seq_len: int = typer.Option(None, "--seq-len", help="Packed sequence length, capped at the model's maximum (default 1024)."),
    batch_size: int = typer.Option(None, "--batch-size", help="Sequences per forward pass (default 8)."),
    positions: str = typer.Option(None, "--positions", help="all tokens (default), or the last token of each sequence."),
    dtype: str = typer.Option(None, "--dtype", help="auto (float32 on CPU, bfloat16 on GPU; default), float32, bfloat16, float16."),
    device: str = typer.Option(None, "--device", help="auto (default), cpu, cuda or cuda:N."),
    revision: str = o.Revision,
    trust_remote_code: bool = o.TrustRemoteCode,
    layers_path: str = o.LayersPath,
    stack: str = o.Stack,
    quantize: str = o.Quantize,
    device_map: str = o.DeviceMap,
    offload: str = o.Offload,
    gguf_file: str = o.GGUFFile,
    cache: bool = o.Cache,
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/<model>/angular)."),
    overwrite: bool = o.Overwrite,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted pass in --out from its last saved "
                                "sums (saved every minute)."),
    save_every: float = typer.Option(None, "--save-every", help="Seconds between saves of the running sums for "
                                     "--resume (default 60; 0 saves after every batch)."),
    lens_tokens: int = typer.Option(None, "--lens-tokens", help="Causal LMs: token positions for the logit-lens "
                                    "column of layers.csv (default 512; 0 skips it)."),
    formats: str = o.Formats,
    top: int = typer.Option(None, "--top", help="Block sizes shown in the terminal table (default 8)."),
) -> None:
    """Angular distance d(x_l, x_{l+n}) = arccos(cos)/pi between block inputs, for every l and n."""
    from layerprobe.commands.angular import run_angular
    from layerprobe.config import find_project_config, pick

    project, _ = call(find_project_config)
    d = AngularConfig()  # the defaults
    config = AngularConfig(
        model=ModelOptions(pick(model, project, "model", d.model.model), pick(dtype, project, "dtype", d.model.dtype),
                           pick(device, project, "device", d.model.device), revision, trust_remote_code, layers_path,
                           device_map, offload, gguf_file, cache, stack, quantize),
        data=DataOptions(pick(dataset, project, "dataset", d.data.dataset), text_field,
                         pick(tokens, project, "tokens", d.data.tokens), pick(seq_len, project, "seq_len", d.data.seq_len),
                         pick(batch_size, project, "batch_size", d.data.batch_size),
                         seq_len_given=seq_len is not None or "seq_len" in project),
        positions=d.positions if positions is None else positions,
        out=out_dir or (f"{project['out']}/angular" if "out" in project else None),
        overwrite=overwrite,
        resume=resume,
        save_every=d.save_every if save_every is None else save_every,
        lens_tokens=d.lens_tokens if lens_tokens is None else lens_tokens,
        formats=parse_formats(formats),
        top=d.top if top is None else top,
    )
    with progress_bar() as progress:
        run = call(run_angular, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 reports
    show_warnings(run.warnings)
    summary = run.summary
    table = Table(title="Most prunable blocks: smallest d(x_l, x_l+n) per n")
    for column in ("n", "layers", "distance"):
        table.add_column(column, justify="right")
    for row in summary["prune_first"][: config.top]:
        table.add_row(str(row["n"]), row["layers"], f"{row['distance']:.4f}")
    out.print(table)
    out.print(
        f"{summary['num_layers']} layers ({summary['layers_path']}), {summary['tokens']:,} tokens, "
        f"{summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]",
        highlight=False,
    )
