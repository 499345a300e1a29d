"""`layerprobe prune [MODEL] --task TASK`: remove one layer (or block) at a time, measure dP."""

from __future__ import annotations

import typer
from rich.table import Table

from layerprobe.cli import options as o
from layerprobe.cli.common import call, out, parse_formats, parse_size, progress_bar, show_warnings
from layerprobe.config import CURVE_STRATEGIES, SQUAD_DATASET, CurveSettings, DataOptions, ModelOptions, PruneConfig


def prune(
    model: str = typer.Argument(None, help="Hub id, local folder, .gguf file, 'minilm' or 'smollm2' (embedded); default from [tool.layerprobe]."),
    task: str = typer.Option(None, "--task", help="lm-eval task/group (mmlu, arc_easy, ...), squad, or ppl | kl | drift."),
    include_path: str = typer.Option(None, "--include-path", help="Folder of local lm-eval task YAML files."),
    mmlu_data: str = typer.Option(None, "--mmlu-data", help="--task mmlu (or a subject or category): read MMLU "
                                  "from this local JSON-lines file, scored by lm-eval's own MMLU tasks (offline)."),
    num_fewshot: int = typer.Option(None, "--num-fewshot", help="lm-eval few-shot examples (task default if unset)."),
    limit: float = typer.Option(None, "--limit", help="lm-eval/squad: first N documents or questions (a fraction if < 1)."),
    layers: str = typer.Option(None, "--layers", help="Only these start layers, e.g. 0,3,8-11."),
    block: int = typer.Option(None, "--block", help="Remove N consecutive layers per variant (default 1)."),
    part: str = typer.Option("block", "--part", show_default=False, help="What goes of each removed layer: block (all of it; default), attn or mlp "
                             "(only that sub-layer; the residual path stays)."),
    curve: bool = typer.Option(False, "--curve", help="Removal curves: for k = 1..K, the k layers each strategy picks, "
                               "scored on --task -> curve.csv, curve.png."),
    strategies: str = typer.Option(",".join(CURVE_STRATEGIES), "--strategies", show_default=False, help="--curve: comma-separated (default all four), of "
                                   "angular (best block of k by d(l, k)), bi (k smallest Block Influence), greedy "
                                   "(SLEB-style, one layer at a time), last (the last k)."),
    max_removed: int = typer.Option(None, "--max-removed", help="--curve: largest k (default: --max-fraction of the layers)."),
    max_fraction: float = typer.Option(None, "--max-fraction", help="--curve: largest fraction of the layers removed (default 0.5)."),
    greedy_metric: str = typer.Option(None, "--greedy-metric", help="--curve: what greedy minimizes on the probe corpus, kl (default) or ppl."),
    keep: float = typer.Option(None, "--keep", help="--curve: a k is within tolerance when the score keeps this share of "
                               "the baseline (accuracy), or ppl <= baseline / keep, kl <= ln(1/keep) (default 0.95)."),
    shard: str = typer.Option(None, "--shard", help="K/N: only the K-th of N disjoint slices of the variants (SLURM "
                              "arrays, one process per GPU); join the N run folders with `layerprobe merge`."),
    metric: str = typer.Option(None, "--metric", help="Metric for the summary and plot (default: the task's main one)."),
    shared_prefix: bool = typer.Option(True, "--shared-prefix/--no-shared-prefix", show_default=False,
                                       help="Restart each variant from the stored block input (ppl/kl/drift and lm-eval "
                                       "loglikelihood tasks; default); --no-shared-prefix scores each variant on its own."),
    max_memory: str = typer.Option(None, "--max-memory", help="lm-eval shared prefix: memory for a batch's stored "
                                   "block inputs, e.g. 8GiB (default: half the free GPU memory, a quarter of RAM)."),
    angular_dir: str = typer.Option(None, "--angular", help="Angular run of the same model, for the correlation."),
    dataset: str = typer.Option(None, "--dataset", help="ppl/kl/drift: probe corpus (as in angular; default c4). "
                                "squad: SQuAD .json/.jsonl or hub id (default rajpurkar/squad)."),
    text_field: str = o.TextField,
    tokens: int = typer.Option(None, "--tokens", help="ppl/kl/drift: token positions (default 65536)."),
    seq_len: int = typer.Option(None, "--seq-len", help="Packed sequence length (default 1024, capped)."),
    batch_size: int = typer.Option(None, "--batch-size", help="Sequences per forward (default 8)."),
    dtype: str = typer.Option(None, "--dtype", help="auto, float32, bfloat16, float16."),
    device: str = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:N."),
    revision: str = o.Revision,
    trust_remote_code: bool = o.TrustRemoteCode,
    layers_path: str = o.LayersPath,
    stack: str = o.Stack,
    quantize: str = o.Quantize,
    device_map: str = o.DeviceMap,
    offload: str = o.Offload,
    gguf_file: str = o.GGUFFile,
    cache: bool = o.Cache,
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/<model>/prune-<task>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out."),
    overwrite: bool = o.Overwrite,
    formats: str = o.Formats,
) -> None:
    """Performance drop dP(l) = P_pruned(l) - P_original of removing each layer (or block of n)."""
    from layerprobe.cli.common import fail
    from layerprobe.evaluation.variants import shard_suffix
    from layerprobe.config import find_project_config, pick
    from layerprobe.commands.prune.run import run_prune

    project, _ = call(find_project_config)
    task = pick(task, project, "task", None)
    if task is None:
        raise fail("No --task given: pass one (mmlu, arc_easy, ppl, kl, drift, squad, ...) or set task in [tool.layerprobe].")
    d, c = PruneConfig(), CurveSettings()  # the defaults
    config = PruneConfig(
        task=task,
        model=ModelOptions(pick(model, project, "model", d.model.model), pick(dtype, project, "dtype", d.model.dtype),
                           pick(device, project, "device", d.model.device), revision, trust_remote_code, layers_path,
                           device_map, offload, gguf_file, cache, stack, quantize),
        data=DataOptions(dataset or (SQUAD_DATASET if task == "squad" else pick(None, project, "dataset", d.data.dataset)),
                         text_field, pick(tokens, project, "tokens", d.data.tokens),
                         pick(seq_len, project, "seq_len", d.data.seq_len),
                         pick(batch_size, project, "batch_size", d.data.batch_size),
                         seq_len_given=seq_len is not None or "seq_len" in project),
        include_path=pick(include_path, project, "include_path", d.include_path),
        mmlu_data=mmlu_data,
        num_fewshot=pick(num_fewshot, project, "num_fewshot", d.num_fewshot),
        limit=pick(limit, project, "limit", d.limit),
        layers=pick(layers, project, "layers", d.layers),
        block=pick(block, project, "block", d.block),
        part=part,
        curve=CurveSettings(tuple(s.strip() for s in strategies.split(",") if s.strip()), max_removed,
                            c.max_fraction if max_fraction is None else max_fraction,
                            greedy_metric or c.greedy_metric, c.keep if keep is None else keep) if curve else None,
        metric=metric,
        shard=shard,
        shared_prefix=shared_prefix,
        max_memory=parse_size(max_memory) if max_memory else None,
        angular=angular_dir,
        out=out_dir or (f"{project['out']}/{'curve' if curve else 'prune'}-{task}{'' if part == 'block' else '-' + part}"
                        f"{call(shard_suffix, shard)}" if "out" in project else None),
        resume=resume,
        overwrite=overwrite,
        formats=parse_formats(formats),
    )
    if curve:
        from layerprobe.commands.prune.curve import run_curve

        with progress_bar() as progress:
            show_curve(call(run_curve, config, progress))
        return
    with progress_bar() as progress:
        run = call(run_prune, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 merges and reports
    show_prune(run)


def show_prune(run) -> None:
    """The dP table and the one-line verdict, for prune and merge."""
    show_warnings(run.warnings)
    s = run.summary
    table = Table(title=f"dP = P_pruned - P_original ({s['metric']}, baseline {s['baseline']:.4g})")
    for column in ("removed", "pruned", "delta"):
        table.add_column(column, justify="right")
    main = run.table[run.table["metric"] == s["metric"]]
    for row in main.itertuples():
        table.add_row(str(row.removed), f"{row.pruned:.4g}", f"{row.delta:+.4g}")
    out.print(table)
    if s.get("shared_prefix"):
        c = s["shared_prefix"]
        out.print(f"shared prefix: batch {c['batch_size']} (longest request {c['longest_tokens']} tokens, "
                  f"{c['gib_per_sequence']} GiB per sequence, {c['budget_gib']} GiB allowed)", highlight=False)
    extra = f", Spearman(angular, dP) = {s['spearman_angular_delta']:.2f}" if s["spearman_angular_delta"] is not None else ""
    out.print(f"least important: {', '.join(s['least_important'])}; most important: "
              f"{', '.join(s['most_important'])}{extra} -> [bold]{run.folder}[/bold]", highlight=False)


def show_curve(run) -> None:
    """Per strategy: how many layers can go within the tolerance, and which."""
    show_warnings(run.warnings)
    s = run.summary
    table = Table(title=f"Removal curve: {s['metric']} (unpruned {s['baseline']:.4g}), within tolerance keep={s['keep']:g}")
    for column in ("strategy", "layers that can go", "removed (0-based, inclusive)", s["metric"]):
        table.add_column(column, justify="right")
    for strategy, verdict in s["curve"].items():
        score = f"{verdict['score']:.4g}" if verdict["score"] is not None else "-"
        table.add_row(strategy, f"{verdict['max_k']} of {s['num_layers']}", verdict["removed"] or "-", score)
    out.print(table)
    out.print(f"{s['sets_scored']} layer sets scored, {s['seconds']:.1f} s -> [bold]{run.folder}[/bold]", highlight=False)
