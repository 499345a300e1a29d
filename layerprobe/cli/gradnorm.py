"""`layerprobe gradnorm`: per-layer gradient norms at initialization, per normalization placement."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli import options as o
from layerprobe.cli.common import call, given, out, parse_formats, progress_bar, show_warnings
from layerprobe.config import DataOptions, GradnormConfig, ModelOptions, TrainSettings


def gradnorm(
    model: str = typer.Argument(None, help="A checkpoint (as it is, or --reinit); default: the in-house family."),
    arch: str = typer.Option(None, "--arch", help="In-house size: tiny, llama-71m (default), llama-130m, llama-250m, "
                             "llama-1b, llama-7b."),
    norm: str = typer.Option(None, "--norm", help="Placements: pre, post, mix, lns, deepnorm, sandwich (default "
                             "pre,post,mix,lns)."),
    alpha: float = typer.Option(None, "--mix-alpha", help="Mix-LN: fraction of Post-LN layers, in [0, 1] (default 0.25)."),
    alpha_alias: float = typer.Option(None, "--alpha", hidden=True),  # the old name, kept for existing scripts
    norm_type: str = typer.Option(None, "--norm-type", help="rmsnorm (default) or layernorm."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="Tokenizer for in-house models (default: embedded MiniLM's)."),
    seeds: int = typer.Option(None, "--seeds", help="Initializations per placement (default 2)."),
    batches: int = typer.Option(None, "--batches", help="Batches per initialization (default 2)."),
    reinit: bool = typer.Option(False, "--reinit", help="Re-initialize MODEL from its config."),
    steps: int = typer.Option(None, "--steps", help="Train N AdamW steps after init, measuring along the way (default 0)."),
    lr: float = typer.Option(None, "--lr", help="--steps: peak learning rate, linear warmup then cosine to 10% (default 0.001)."),
    warmup: int = typer.Option(None, "--warmup", help="--steps: warmup steps (default 10% of --steps)."),
    clip: float = typer.Option(None, "--clip", help="--steps: max gradient norm, 0 = off (default 1.0)."),
    record_steps: str = typer.Option(None, "--record-steps", help="Steps to measure at, e.g. 0,100,500 "
                                     "(default: 0, each quarter, the end)."),
    dtype: str = typer.Option(None, "--dtype", help="auto (float32 on CPU, bfloat16 on GPU; default), float32, bfloat16."),
    dataset: str = typer.Option(None, "--dataset", help="c4 (hub, streamed; default), builtin (offline English), hub "
                                "name[:config][:split], or a .txt/.jsonl/.parquet file or save_to_disk folder."),
    text_field: str = o.TextField,
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (default 256)."),
    batch_size: int = typer.Option(None, "--batch-size", help="Sequences per batch (default 4)."),
    device: str = typer.Option(None, "--device", help="auto (default), cpu, cuda or cuda:N."),
    revision: str = o.Revision,
    trust_remote_code: bool = o.TrustRemoteCode,
    layers_path: str = o.LayersPath,
    stack: str = o.Stack,
    device_map: str = o.DeviceMap,
    offload: str = o.Offload,
    gguf_file: str = o.GGUFFile,
    cache: bool = o.Cache,
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/<arch or model>/gradnorm)."),
    overwrite: bool = o.Overwrite,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out: finished "
                                "(placement, seed) jobs are kept."),
    formats: str = o.Formats,
) -> None:
    """Gradient norm of every block (parameters, input) and its output variance at init or after --steps, per placement."""
    from layerprobe.commands.gradnorm.run import run_gradnorm
    from layerprobe.config import find_project_config, pick

    project, _ = call(find_project_config)
    d = GradnormConfig()  # the defaults
    dtype, device = pick(dtype, project, "dtype", d.dtype), pick(device, project, "device", d.device)
    config = GradnormConfig(
        model=ModelOptions(model, dtype, device, revision, trust_remote_code, layers_path,
                           device_map, offload, gguf_file, cache, stack) if model else None,
        arch=given(arch, d.arch),
        norms=tuple(n.strip() for n in norm.split(",") if n.strip()) if norm is not None else d.norms,
        alpha=given(alpha if alpha is not None else alpha_alias, d.alpha),
        norm_type=given(norm_type, d.norm_type),
        tokenizer=tokenizer,
        seeds=given(seeds, d.seeds),
        batches=given(batches, d.batches),
        reinit=reinit,
        device=device,
        dtype=dtype,
        train=TrainSettings(given(steps, d.train.steps), given(lr, d.train.lr), warmup, given(clip, d.train.clip)),
        record_steps=record_steps,
        data=DataOptions(pick(dataset, project, "dataset", d.data.dataset), text_field, 0,
                         pick(seq_len, project, "seq_len", d.data.seq_len),
                         pick(batch_size, project, "batch_size", d.data.batch_size),
                         seq_len_given=seq_len is not None or "seq_len" in project),
        out=out_dir or (f"{project['out']}/gradnorm" if "out" in project else None),
        overwrite=overwrite,
        resume=resume,
        formats=parse_formats(formats),
    )
    with progress_bar() as progress:
        run = call(run_gradnorm, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 reports
    show_warnings(run.warnings)
    table = Table(title="Last third of layers over first third (at the first recorded step)")
    table.add_column("placement")
    for column in ("params grad", "input grad", "output variance"):
        table.add_column(column, justify="right")
    losses = run.summary.get("final_loss", {})
    if losses:
        table.add_column(f"loss @ {run.summary['steps']}", justify="right")
    for name, info in run.summary["placements"].items():
        fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        cells = [fmt(info["params_late_over_early"]), fmt(info["input_late_over_early"]),
                 fmt(info["variance_late_over_early"])]
        table.add_row(name, *cells, *([fmt(losses.get(name))] if losses else []))
    out.print(table)
    out.print(f"{run.summary['seconds']:.1f} s -> [bold]{run.folder}[/bold]", highlight=False)
