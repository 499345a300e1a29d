"""`layerprobe prune [MODEL] --task TASK`: remove one layer (or block) at a time, measure dP."""

from __future__ import annotations

import os

import typer
from rich.table import Table

from layerprobe.cli.common import call, out, progress_bar, resolve_settings, show_warnings
from layerprobe.cli.options import RUN_FOLDER, given_any, model_argument, with_settings
from layerprobe.commands.prune import CURVE_COMMAND, PRUNE_COMMAND
from layerprobe.config import SQUAD_DATASET, CurveSettings, PruneConfig


@with_settings(PruneConfig, base=PruneConfig(curve=CurveSettings()), skip=("task", "out"), helps={
    "data.dataset": "ppl/kl/drift: probe corpus (as in angular; default c4). squad: SQuAD .json/.jsonl or hub id "
                    "(default rajpurkar/squad).",
    "data.tokens": "ppl/kl/drift: token positions (default 65536)."}, arguments={"model": "model.model"})
def prune(
    model: str = model_argument("Default minilm, unless [tool.layerprobe] names one."),
    task: str = typer.Option(None, "--task", help="lm-eval task/group (mmlu, arc_easy, ...), squad, or ppl | kl | drift."),
    curve: bool = typer.Option(False, "--curve", help="Removal curves: for k = 1..K, the k layers each strategy picks, "
                               "scored on --task -> curve.csv, curve.png."),
    out_dir: str = typer.Option(None, "--out", help="Run folder (default reports/<model>/prune-<task>).",
                                rich_help_panel=RUN_FOLDER),
    given: dict | None = None,
) -> None:
    """Measure what each layer is worth: the score lost when it (or a block of n) is removed.

    dP(l) = P_pruned(l) - P_original on an lm-eval task, squad, ppl, kl or drift; --curve: how many layers can go."""
    from layerprobe.cli.common import fail
    from layerprobe.config import find_project_config

    project_file = call(find_project_config)  # read once: the task here, every other setting in resolve_settings
    project = project_file[0]
    task = task or os.environ.get("LAYERPROBE_TASK") or project.get("task")
    if task is None:
        raise fail("No --task given: pass one (mmlu, arc_easy, ppl, kl, drift, squad, ...) or set task in [tool.layerprobe].")
    curve_given = given_any(given, "curve")
    if curve_given and not curve:
        raise fail(f"{', '.join('--' + k.split('.')[1].replace('_', '-') for k in curve_given)} shape a removal "
                   "curve: add --curve, or drop them.")
    data = given["data"]
    if task == "squad" and data["dataset"] is None:  # SQuAD's own data unless --dataset names a file
        data = {**data, "dataset": SQUAD_DATASET}
    given = {**given, "task": task, "out": out_dir, "curve": given["curve"] if curve else None, "data": data}
    config, _ = resolve_settings(CURVE_COMMAND if curve else PRUNE_COMMAND, given, project_file=project_file)
    if not curve:  # a range outside the model, in a moment: before torch is imported or the weights load
        from layerprobe.commands.probe import refuse_ranges_early

        call(refuse_ranges_early, config.model, layers=config.layers, block=config.block)
    if curve:
        from layerprobe.commands.prune.curve import run_curve

        with progress_bar() as progress:
            show_curve(call(run_curve, config, progress))
        return
    from layerprobe.commands.prune.run import run_prune

    with progress_bar() as progress:
        run = call(run_prune, config, progress)
    if run.folder is None:
        return  # a non-zero rank of a distributed run: rank 0 merges and reports
    show_prune(run)


def show_prune(run) -> None:
    """The dP table and the one-line verdict, for prune and merge."""
    from layerprobe.commands.prune.read import cost_rho

    show_warnings(run.warnings)
    s = run.summary
    table = Table(title=f"dP = P_pruned - P_original ({s['metric']}, baseline {s['baseline']:.4g})")
    main = run.table[run.table["metric"] == s["metric"]]
    paired = "delta_lo" in main and main["delta_lo"].notna().any()
    for column in ("removed", "pruned", "delta", *(("95% interval", "Holm") if paired else ())):
        table.add_column(column, justify="right")
    for row in main.itertuples():
        cells = [str(row.removed), f"{row.pruned:.4g}", "0" if row.delta == 0 else f"{row.delta:+.4g}"]
        if paired:
            cells += [f"{row.delta_lo:+.3g} to {row.delta_hi:+.3g}" if row.delta_lo == row.delta_lo else "-",
                      "measurable" if row.significant else ""]
        table.add_row(*cells)
    out.print(table)
    if s.get("shared_prefix"):
        c = s["shared_prefix"]
        out.print(f"shared prefix: batch {c['batch_size']} (longest request {c['longest_tokens']} tokens, "
                  f"{c['gib_per_sequence']} GiB per sequence, {c['budget_gib']} GiB allowed)", highlight=False)
    rho = s["spearman_angular_delta"]  # with dP in summary.json; said with the cost of removal, as the findings say it
    extra = (f", Spearman(d(l, 1), cost of removal) = {cost_rho(rho, s.get('higher_is_better', True)):+.2f}"
             if rho is not None else "")
    from layerprobe.report.findings import ranking_line

    ranking = ranking_line(main, s.get("higher_is_better", True), s["metric"], paired)
    if paired:  # what the paired intervals carry, then the points: never a ranking of noise said as measured
        found = ", ".join(s.get("significant") or []) or "none"
        ranking = f"measurably different (paired 95% interval, Holm's correction over {len(main)}): {found}; {ranking}"
    out.print(f"{ranking}{extra} -> [bold]{run.folder}[/bold]", highlight=False)


def show_curve(run) -> None:
    """Per strategy: how many layers can go within the tolerance, and which."""
    show_warnings(run.warnings)
    s = run.summary
    table = Table(title=f"Removal curve: {s['metric']} (unpruned {s['baseline']:.4g}), within tolerance keep={s['keep']:g}")
    for column in ("strategy", "layers that can go", "removed (0-based, inclusive)", s["metric"]):
        table.add_column(column, justify="right")
    from layerprobe.commands.prune.read_curve import too_few

    bound = s.get("keep_by") == "bound"
    few = too_few(s, bound)  # under bound: no interval to judge a k by, so no count of layers that can go
    for strategy, verdict in s["curve"].items():
        score = f"{verdict['score']:.4g}" if verdict["score"] is not None else "-"
        can_go = "not judged" if few and bound else f"{verdict['max_k']} of {s['num_layers']}"
        table.add_row(strategy, can_go, verdict["removed"] or "-", score)
    out.print(table)
    if few:
        out.print(few, highlight=False)
    out.print(f"{s['sets_scored']} layer sets scored, {s['seconds']:.1f} s -> [bold]{run.folder}[/bold]", highlight=False)
