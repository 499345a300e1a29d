"""Per-document records of a scored sweep (samples.csv.gz: one row per variant and document, the unpruned model's
rows once) and the paired intervals of every dP computed from them (metrics/paired.py).

The rows come from what each task already scores: lm-eval's logged samples (its per-document metrics, and for
multiple choice the loglikelihood of every choice), SQuAD's per-question exact match and F1, and the task-free
metrics' per-sequence sums. Nothing here imports lm_eval.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from layerprobe.errors import NumericsError, RunError
from layerprobe.metrics.decisions import MIN_CLUSTERS, MIN_DOCUMENTS, SMALL, newcombe_paired
from layerprobe.metrics.paired import CORRECTION, Interval, Statistic, contrast, holm, mcnemar, score

UNPRUNED = "unpruned"  # the `removed` value of the unpruned model's rows
HEALED = " healed"  # a healed curve's records: '<set> healed', and 'unpruned healed' for its reference


def healed_label(label: str) -> str:
    """The `removed` value of a healed set's records (label '' : the unpruned model healed alike)."""
    return (label or UNPRUNED) + HEALED
FILE = "samples.csv.gz"
REPRODUCE_RTOL = 1e-9  # records must give the table's score to this relative precision, else no interval
# the columns every records file has, in order (declared in commands/prune/__init__.py RECORDS); each per-document metric of the
# task follows as a column of its own (acc, acc_norm, exact_match, f1, ...)
FIXED = ("removed", "task", "doc_id", "gold", "chosen", "chosen_norm", "gold_loglik", "gold_loglik_norm",
         "tokens", "total")
LOGLIK = {"acc": "gold_loglik", "acc_norm": "gold_loglik_norm"}  # the continuous score beside each accuracy
CHOICE = "choice_loglik_"  # multiple choice: choice_loglik_0, choice_loglik_1, ...: every choice's loglikelihood
CHARS = "choice_chars_"  # and every choice's length in characters (what acc_norm divides its loglikelihood by)
MARGIN = "margin"  # derived from them (Wide): the gold choice's loglikelihood minus the best wrong choice's
MARGIN_NORM = "margin_norm"  # the same per character (acc_norm picks by loglikelihood / choice length)
MARGINS = {"acc": MARGIN, "acc_norm": MARGIN_NORM}  # the accuracies whose rows carry the margin's change
INTERVAL_COLUMNS = ("delta_stderr", "delta_lo", "delta_hi", "p_value", "significant", "family", "loglik_delta",
                    "loglik_lo", "loglik_hi", "loglik_p_value", "loglik_significant", "margin_delta", "margin_lo",
                    "margin_hi", "margin_p_value", "margin_significant")
FAMILIES = ("main", "all")  # --family: Holm over the main metric's variants (other rows exploratory), or every row
CLUSTERS = ("subtask", "none")  # --cluster: subtask-clustered intervals for a group's main metric, or per document
FLAGS = ("significant", "loglik_significant", "margin_significant")


# ---- rows from each kind of task --------------------------------------------------------------------------------

def _label(name: str, filt: str) -> str:
    return name if filt == "none" else f"{name}[{filt}]"


def _choice_fields(sample: dict, task: Any) -> dict:
    """Multiple choice: the gold index, the choice picked by loglikelihood and by loglikelihood per character (as
    lm-eval's acc and acc_norm pick), and the gold choice's loglikelihood, raw and per character."""
    choices = list(task.doc_to_choice(sample["doc"]))
    lls = np.array([float(r[0]) for r in sample["filtered_resps"]][: len(choices)])  # mutual info doubles them
    if not np.isfinite(lls).all():  # argmax would still pick a choice: a made-up accuracy
        name = getattr(getattr(task, "config", None), "task", None) or "the task"
        raise NumericsError(f"The model scores a NaN or infinite loglikelihood on document {sample.get('doc_id')} "
                            f"of {name}: its activations overflow the dtype (run with --dtype float32) or the "
                            "checkpoint is broken (load it with transformers and run one forward).")
    lengths = np.array([float(len(c)) for c in choices])
    gold = sample["target"]
    if isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else None
    if not isinstance(gold, (int, np.integer)) or not 0 <= gold < len(choices):
        gold = None  # several gold answers, or one outside the choices
    return {"gold": gold, "chosen": int(np.argmax(lls)), "chosen_norm": int(np.argmax(lls / lengths)),
            "gold_loglik": float(lls[gold]) if gold is not None else math.nan,
            "gold_loglik_norm": float(lls[gold] / lengths[gold]) if gold is not None else math.nan,
            **{f"{CHOICE}{i}": float(ll) for i, ll in enumerate(lls)},
            **{f"{CHARS}{i}": int(n) for i, n in enumerate(lengths)}}


def lm_eval_rows(samples: dict, tasks: dict) -> list[dict]:
    """lm-eval's logged samples ({task: [sample, ...]}) as records: every numeric per-document metric, and the
    multiple-choice fields where the task is multiple choice."""
    rows = []
    for name, logged in sorted(samples.items()):
        task = tasks.get(name)
        choice = task is not None and task.get_config("output_type") == "multiple_choice"
        for sample in logged:
            row: dict = {"task": name, "doc_id": int(sample["doc_id"])}
            if choice:
                row |= _choice_fields(sample, task)
            for metric in sample.get("metrics", []):
                value = sample.get(metric)
                if isinstance(value, (bool, int, float, np.integer, np.floating)):
                    row[_label(metric, sample.get("filter", "none"))] = float(value)
            rows.append(row)
    return sorted(rows, key=lambda r: (r["task"], r["doc_id"]))


def leaf_tasks(group_subtasks: dict) -> dict[str, list[str]]:
    """lm-eval's group -> direct subtasks, as group -> every leaf task under it."""
    def leaves(name: str, seen: tuple = ()) -> list[str]:
        if name not in group_subtasks or name in seen:
            return [name]
        return sorted({t for sub in group_subtasks[name] for t in leaves(sub, (*seen, name))})

    return {group: leaves(group) for group in group_subtasks if group_subtasks[group]}


def sequence_rows(task: str, sums: list) -> list[dict]:
    """A task-free metric's per-sequence [sum over positions, positions] as records; a sequence with no position
    scored (ppl of a last sequence of one token: no next-token target) adds nothing to the score and is left out,
    where its 0 / 0 would cost every interval."""
    return [{"task": task, "doc_id": i, "tokens": int(n), "total": float(t)} for i, (t, n) in enumerate(sums) if n]


# ---- the file ---------------------------------------------------------------------------------------------------

def frame(rows: list[dict]) -> Any:
    """Records as a DataFrame: the fixed columns, then the task's metric columns in their first order."""
    import pandas as pd

    table = pd.DataFrame(rows)
    extra = [c for c in table.columns if c not in FIXED]
    table = table.reindex(columns=[*FIXED, *extra])
    for column in ("gold", "chosen", "chosen_norm", "tokens"):
        table[column] = table[column].astype("Int64")
    return table


def write(folder: Path, rows: list[dict]) -> Path:
    """samples.csv.gz, atomically, floats in their shortest exact form (read back bit for bit)."""
    import gzip
    import io

    from layerprobe.runs.folder import atomic_write_bytes

    text = io.StringIO()
    frame(rows).to_csv(text, index=False)
    path = folder / FILE
    atomic_write_bytes(path, gzip.compress(text.getvalue().encode("utf-8"), compresslevel=6, mtime=0))
    return path


def read_frame(folder: Path) -> Any:
    """The records of a run folder as a DataFrame (None without a records file), checked as every table read back is
    (runs/read.py read_table: one line naming the file, row and column)."""
    from layerprobe.runs.read import check_finite, check_numbers, read_table

    path = Path(folder) / FILE
    if not path.is_file():
        return None
    table = read_table(path, dtype={"removed": str, "task": str})
    metrics = [c for c in table.columns if c not in ("removed", "task")]
    check_numbers(path, table, metrics)  # each metric's too
    check_finite(path, table, [c for c in metrics if c not in FIXED])  # no infinity (empty: not that task's)
    check_needed(path, table)
    return table


def check_needed(path: Path, table: Any) -> None:
    """The columns the records' tasks score from, in every row of the task: a task-free metric's (ppl, kl, drift)
    tokens and total, an lm-eval or squad task's at least one metric column. The record declares them optional (each
    task has its own), so a file that lost one is caught here, one line naming the file, the row and the column,
    never an interval or a merged verdict from what is left."""
    from layerprobe.evaluation.metric import METRICS

    free = table["task"].isin(list(METRICS)) if "task" in table else None
    if free is None or not free.any():
        scored = [c for c in table.columns if c not in (*FIXED, "removed", "task") and not c.startswith("choice_")]
        if not scored:
            raise RunError(f"'{path}' lacks every per-document metric column (acc, exact_match, ...): re-run the "
                           "command, or restore the file.")
        return
    for column in ("tokens", "total"):
        if column not in table.columns:
            raise RunError(f"'{path}' lacks the column '{column}', which the task-free rows ({table['task'][free].iloc[0]}) "
                           "are scored from: re-run the command, or restore the file.")
        empty = free & table[column].isna()
        if empty.any():
            row = int(empty.to_numpy().nonzero()[0][0]) + 1
            raise RunError(f"'{path}' row {row}, column {column}: empty (or NaN), where the task-free rows' "
                           f"{column} belongs: re-run the command, or restore the file.")


def read(folder: Path) -> list[dict] | None:
    """The records of a run folder (None without a records file)."""
    table = read_frame(folder)
    if table is None:
        return None
    return [{k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
            for row in table.to_dict("records")]


# ---- intervals from the records ---------------------------------------------------------------------------------

def statistic(metric: str) -> tuple[str, Statistic]:
    """(records column, how the score follows from it) of a metric label (acc, acc/mmlu_anatomy, ppl, ...)."""
    from layerprobe.evaluation.metric import METRICS

    name = metric.split("/")[0]
    if name in METRICS:
        low, high = METRICS[name].bounds
        return "total", Statistic("exp_ratio" if METRICS[name].exp else "ratio", low=low, high=high)
    return name, Statistic("mean")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REPRODUCE_RTOL * max(1.0, abs(b))


def _choice_columns(records: Any, prefix: str) -> list:
    found = [c for c in records.columns if str(c).startswith(prefix)]
    return sorted(found, key=lambda c: int(str(c)[len(prefix):]))


def margins(records: Any, norm: bool = False) -> Any:
    """Each multiple-choice document's margin: the gold choice's loglikelihood minus the highest loglikelihood of a
    wrong choice; norm: of the loglikelihoods per character, as lm-eval's acc_norm compares them (each choice's
    choice_loglik_<i> / choice_chars_<i>). NaN without every choice's loglikelihood (and length), a gold index or a
    wrong choice; None where the records hold no such columns."""
    columns = _choice_columns(records, CHOICE)
    if not columns or "gold" not in records:
        return None
    lls = records[columns].to_numpy(dtype=float)  # (rows, most choices), NaN past a document's own choices
    if norm:
        chars = _choice_columns(records, CHARS)
        if len(chars) != len(columns):
            return None  # records written before choice lengths were kept: no acc_norm margin
        lengths = records[chars].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lls = np.where(lengths > 0, lls / lengths, math.nan)
    gold = records["gold"].to_numpy(dtype=float)
    known = np.isfinite(gold) & (gold >= 0) & (gold < len(columns))
    rows = np.flatnonzero(known)
    at = gold[known].astype(int)
    out = np.full(len(records), math.nan)
    wrong = lls[rows].copy()
    wrong[np.arange(len(rows)), at] = -math.inf
    best = np.where(np.isnan(wrong), -math.inf, wrong).max(axis=1)
    out[rows] = np.where(np.isfinite(best), lls[rows, at] - best, math.nan)
    return out


class Wide:
    """The records by column: for each value column, a (task, doc_id) x variant table (and the derived margin)."""

    def __init__(self, records: Any) -> None:
        for name, norm in ((MARGIN, False), (MARGIN_NORM, True)):
            found = margins(records, norm)
            if found is not None:
                records = records.assign(**{name: found})
        self.index = records.set_index(["removed", "task", "doc_id"]).sort_index()
        self.cache: dict[str, Any] = {}

    def column(self, name: str) -> Any:
        if name not in self.cache:
            self.cache[name] = self.index[name].unstack("removed") if name in self.index else None
        return self.cache[name]


def wide_of(records: Any) -> Wide | None:
    """The records by column: a Wide as it is (built once per run's decisions and passed on), else one built from
    the rows (a list of dicts, or their DataFrame); None without records."""
    if isinstance(records, Wide):
        return records
    if records is None or (hasattr(records, "empty") and records.empty) or (isinstance(records, list) and not records):
        return None
    return Wide(records if hasattr(records, "columns") else frame(records))


def _scope(metric: str, task: str, groups: dict, tasks: list[str]) -> list[str]:
    """The leaf tasks whose documents a metric label is computed over."""
    scope = metric.split("/", 1)[1] if "/" in metric else task
    if scope in groups:
        return groups[scope]
    return [scope] if scope in tasks else (tasks if "/" not in metric else [])


def _weightings(strata: np.ndarray, stat: Statistic) -> list[Statistic]:
    """A mean over several subtasks: document-weighted (lm-eval's weight_by_size) or each subtask alike."""
    labels = np.unique(strata)
    if stat.kind != "mean" or len(labels) < 2:
        return [stat]
    return [stat, dataclasses.replace(stat, weights={s: 1 / len(labels) for s in labels})]


class _Rows:
    """One column's table of a Wide (values, tokens, the gold loglikelihood, the margin) at a metric's documents,
    each variant's values taken out of pandas once and picked by row position (a pandas selection per row was
    most of the time)."""

    def __init__(self, table: Any, values: Any, inside: np.ndarray) -> None:
        if not table.index.equals(values.index):  # every column of a Wide shares one index
            table = table.reindex(values.index)
        self.table, self.arrays = table.loc[inside], {}
        dtypes = set(self.table.dtypes)
        if len(dtypes) == 1 and isinstance(dtypes.pop(), np.dtype):  # one numpy dtype: every variant in one take
            block = self.table.to_numpy()
            self.arrays = {label: block[:, i] for i, label in enumerate(self.table.columns)}

    def __contains__(self, label: str) -> bool:
        return label in self.table

    def _array(self, label: str) -> Any:
        if label not in self.arrays:
            column = self.table[label]  # a numpy dtype as numpy; a nullable one (Int64) as its pandas array
            self.arrays[label] = column.to_numpy() if isinstance(column.dtype, np.dtype) else column.array
        return self.arrays[label]

    def known(self, label: str) -> np.ndarray:
        import pandas as pd

        return ~np.asarray(pd.isna(self._array(label)))

    def pick(self, labels: tuple[str, str], rows: np.ndarray) -> list[np.ndarray]:
        """The variants' values at row positions, in the column's own dtype (as a pandas selection gives them)."""
        picked = [self._array(label)[rows] for label in labels]
        return [v if isinstance(v, np.ndarray) else v.to_numpy() for v in picked]


def metric_intervals(wide: Wide, metric: str, rows: Any, task: str, groups: dict,
                     cluster: bool = False) -> list[tuple[Interval, Interval, Interval]]:
    """(dP's interval, the gold loglikelihood change's, the margin change's) for each row of one metric (missing
    where the records cannot reproduce the row's scores, or hold no such column). cluster: a mean over at least
    MIN_CLUSTERS subtasks takes subtask-clustered intervals (CR1, t with G - 1 df) instead of the stratified ones."""
    column, stat = statistic(metric)
    values = wide.column(column)
    missing = (Interval.missing(), Interval.missing(), Interval.missing())
    if values is None or UNPRUNED not in values:
        return [missing] * len(rows)
    subtasks = values.index.get_level_values("task")
    inside = subtasks.isin(_scope(metric, task, groups, sorted(set(subtasks))))

    def at_documents(name: str | None) -> _Rows | None:
        """A column of the records at the metric's documents (selected once); None where the records lack it."""
        table = wide.column(name) if name else None
        return _Rows(table, values, inside) if table is not None else None

    scoped = at_documents(column)
    tokens = at_documents("tokens") if stat.kind != "mean" else None  # a ratio's counts
    beside = [at_documents(LOGLIK.get(column)), at_documents(MARGINS.get(column))]
    every = subtasks.to_numpy()[inside].astype(str)  # fixed-width strings: np.unique sorts them fast
    known = scoped.known(UNPRUNED)
    out = []
    for row in rows.itertuples():
        pair = (UNPRUNED, str(row.removed))
        at = np.flatnonzero(known & scoped.known(pair[1])) if pair[1] in scoped else np.empty(0, dtype=int)
        strata = every[at]
        scores = scoped.pick(pair, at)
        counts = tokens.pick(pair, at) if tokens is not None else None
        found = _reproduced(strata, scores, counts, stat, row) if len(at) else None
        if found is None:
            out.append(missing)
            continue
        interval, candidate = found
        clustered = cluster and candidate.kind == "mean" and len(np.unique(strata)) >= MIN_CLUSTERS
        if clustered:
            interval = _clustered(interval, candidate, strata, *scores)
        changes = []
        for other in beside:
            lls = other.pick(pair, at) if other is not None and pair[1] in other else None
            if lls is None or any(np.isnan(np.asarray(v, dtype=float)).any() for v in lls):
                changes.append(Interval.missing())
                continue
            change = contrast(candidate, strata, lls, [-1.0, 1.0])
            changes.append(_clustered(change, candidate, strata, *lls) if clustered else change)
        out.append((interval, *changes))
    return out


def _reproduced(strata: np.ndarray, pair: list, counts: list | None, stat: Statistic,
                row: Any) -> tuple[Interval, Statistic] | None:
    """The paired interval of a row's dP (pair: the unpruned model's and the variant's values on the documents
    both have, counts their tokens for a ratio) under the weighting of the subtasks that reproduces its two scores
    (None where none does): McNemar's exact p for 0/1 scores over every document alike, bounded to the metric's
    range."""
    for candidate in _weightings(strata, stat):
        args = [candidate, strata, pair, [-1.0, 1.0]]
        if counts is not None:
            args.append(counts)
        base, pruned = (score(candidate, strata, pair[k], None if counts is None else counts[k]) for k in (0, 1))
        if _close(base, float(row.baseline)) and _close(pruned, float(row.pruned)):
            interval = contrast(*args)
            exact = mcnemar(*pair) if candidate.weights is None and len(strata) > 1 else None
            if exact is not None:  # 0/1 scores: McNemar's exact test decides, not the t approximation
                interval = dataclasses.replace(interval, p=exact)
            return bounded(interval, *pair, zero_one=exact is not None), candidate
    return None


def _clustered(interval: Interval, stat: Statistic, strata: np.ndarray, before: Any, after: Any) -> Interval:
    """The same change with a subtask-clustered (CR1) standard error, t with G - 1 df (metrics/decisions.py), each
    document weighted as the statistic weighs it; where every cluster's sum is 0 (no document changed) the
    stratified interval stays, which never has a zero width (bounded)."""
    from layerprobe.metrics.decisions import clustered_mean_change

    if stat.weights is None:
        weights = None
    else:
        labels, counts = np.unique(strata, return_counts=True)
        size = dict(zip(labels, counts))
        weights = np.array([stat.weights.get(s, 0.0) / size[s] for s in strata])
    change, stderr, lo, hi, p = clustered_mean_change(np.asarray(before, dtype=float), np.asarray(after, dtype=float),
                                                      strata, weights)
    if not stderr > 0:
        return interval
    return Interval(change, stderr, lo, hi, p)


def bounded(interval: Interval, before: np.ndarray, after: np.ndarray, zero_one: bool) -> Interval:
    """A 0/1 score's change kept to its range and never of zero width: over fewer than SMALL documents, with no
    document changed (the paired stderr 0), or where the t interval leaves [-before, 1 - before] (a score near 0 or
    1), Newcombe's paired score interval. (kl, drift and ppl keep to theirs in metrics/paired.py.)"""
    if not zero_one:  # (McNemar's p: at least two documents)
        return interval
    start = float(np.mean(before))
    if len(before) < SMALL or interval.stderr == 0 or interval.lo < -start or interval.hi > 1 - start:
        lo, hi = newcombe_paired(before, after)
        return dataclasses.replace(interval, lo=lo, hi=hi)
    return interval


def add_intervals(table: Any, records: Any, task: str, groups: dict | None = None,
                  main: str | None = None, family: str = "main", cluster: str = "none") -> Any:
    """prune.csv (or scores.csv) with the paired interval columns: per metric, each variant's dP with its standard
    error, 95% interval and p-value from the records, and for accuracies of multiple choice the gold answer's
    loglikelihood change and the margin's change (acc: of the loglikelihoods, acc_norm: per character), each with
    its interval. cluster 'subtask': a row whose documents fall in at least MIN_CLUSTERS subtasks takes
    subtask-clustered intervals and p-values (CR1, t with G - 1 df; interval_estimand says which); 'none': stratified
    by subtask, documents independent. The family Holm's correction runs over is declared: `main` (the default),
    the variants of the main metric only (`significant` and `loglik_significant` are its verdicts; every other row is
    exploratory: intervals, no flag, `family` 0); `all`, every row of the file with an interval in one family.
    `family` is the number of tests of the row's family. Without records (or where they cannot reproduce a score)
    the columns are empty. main None: the table's first metric. records: the rows (list of dicts), or a Wide of
    them already built (prune_decisions builds one for every decision)."""
    import pandas as pd

    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: use one of {', '.join(FAMILIES)}")
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster {cluster!r}: use one of {', '.join(CLUSTERS)}")
    table = table.drop(columns=[c for c in INTERVAL_COLUMNS if c in table])
    columns = {c: np.full(len(table), False) if c in FLAGS else np.zeros(len(table), dtype=int) if c == "family"
               else np.full(len(table), math.nan) for c in INTERVAL_COLUMNS}  # empty: no records, no interval
    if records:
        _fill(columns, table, records, task, groups or {}, main, family, cluster)
    return pd.concat([table, pd.DataFrame(columns, index=table.index)], axis=1)  # one join, not a column at a time


def _fill(columns: dict[str, np.ndarray], table: Any, records: Any, task: str, groups: dict, main: str | None,
          family: str, cluster: str) -> None:
    """add_intervals' columns (one entry per row of `table`, in its order) from the records, in place."""
    main = main if main is not None else (str(table["metric"].iloc[0]) if len(table) else None)
    wide = wide_of(records)
    found: dict = {}
    tested = []
    for metric, rows in table.groupby("metric", sort=False):
        found |= dict(zip(rows.index, metric_intervals(wide, str(metric), rows, task, groups, cluster == "subtask")))
        tested += [index for index in rows.index if family == "all" or metric == main]
    if main is not None and documents(wide, main) < MIN_DOCUMENTS:
        tested = []  # too few documents to test: intervals for the ranking, no Holm verdict (family 0)
    verdicts = [dict(zip(tested, corrected([found[index][k] for index in tested]))) for k in (0, 1, 2)]
    size = sum(1 for index in tested if found[index][0].p == found[index][0].p)
    numbers = [c for c in INTERVAL_COLUMNS if c not in FLAGS and c != "family"]  # dP's, the loglikelihood's, the margin's
    filled: dict[str, list] = {column: [] for column in (*numbers, *FLAGS, "family")}
    for index, (dp, ll, margin) in found.items():
        for column, value in zip(numbers, (dp.stderr, dp.lo, dp.hi, dp.p, ll.delta, ll.lo, ll.hi, ll.p,
                                           margin.delta, margin.lo, margin.hi, margin.p), strict=True):
            filled[column].append(value)
        for column, flags in zip(FLAGS, verdicts):
            filled[column].append(flags.get(index, False))
        filled["family"].append(size if index in verdicts[0] and dp.p == dp.p else 0)
    at = table.index.get_indexer(list(found))  # the rows' positions (found is keyed by the table's own index)
    for column, values in filled.items() if found else ():
        columns[column][at] = values


def documents(wide: Wide, metric: str) -> int:
    """How many documents the unpruned model's records hold for `metric`'s column."""
    values = wide.column(statistic(metric)[0])
    return 0 if values is None or UNPRUNED not in values else int(values[UNPRUNED].notna().sum())


def interval_estimand(records: Any, metric: str, task: str, groups: dict | None, cluster: str) -> dict | None:
    """Which standard error prune.csv's intervals of `metric` carry: the subtasks its documents fall in, and whether
    they are clustered by subtask (cluster 'subtask' with at least MIN_CLUSTERS of them), stratified by subtask, or
    per document (one task); None without records or for a score that is not a mean (ppl, kl, drift: sequences)."""
    wide = wide_of(records)
    if wide is None:
        return None
    column, stat = statistic(metric)
    values = wide.column(column)
    if values is None or UNPRUNED not in values or stat.kind != "mean":
        return None
    tasks = sorted(set(values.index.get_level_values("task")))
    inside = values.index.get_level_values("task").isin(_scope(metric, task, groups or {}, tasks))
    g = len(set(values.index.get_level_values("task")[inside & values[UNPRUNED].notna().to_numpy()]))
    name = ("clustered" if cluster == "subtask" and g >= MIN_CLUSTERS else "stratified" if g > 1 else "documents")
    words = {"clustered": f"cluster-robust by subtask (CR1, Student's t with {g - 1} df over {g} subtasks): questions "
                          "of a subtask share its few-shot prefix and may move together",
             "stratified": f"stratified by subtask ({g} subtasks as fixed strata, documents independent)"
                           + (f"; --cluster subtask needs at least {MIN_CLUSTERS} subtasks" if cluster == "subtask"
                              else "; --cluster none"),
             "documents": "per document (one task: documents independent)"}[name]
    return {"name": name, "cluster": cluster, "subtasks": g, "df": g - 1 if name == "clustered" else None,
            "min_clusters": MIN_CLUSTERS, "words": words}


def corrected(intervals: list[Interval]) -> list[bool]:
    """Holm's correction over one metric's variants (one without an interval is not counted): each flag says the
    change survives it and its interval excludes 0."""
    return [bool(flag) and (i.lo > 0 or i.hi < 0) for flag, i in zip(holm([i.p for i in intervals]), intervals)]


def paired_change(wide: Wide, column: str, stat: Statistic, before: str, after: str) -> Interval:
    """The paired interval of score(after) - score(before) over the documents both have records of (missing
    where either has none, or they cover other documents)."""
    values, tokens = wide.column(column), wide.column("tokens")
    if values is None or before not in values or after not in values:
        return Interval.missing()
    pair = values[[before, after]]
    if pair.isna().any().any():
        return Interval.missing()
    strata = pair.index.get_level_values("task").to_numpy()
    counts = None if stat.kind == "mean" else [tokens.loc[pair.index, c].to_numpy() for c in (before, after)]
    return contrast(stat, strata, [pair[before].to_numpy(), pair[after].to_numpy()], [-1.0, 1.0], counts)


def healed_intervals(records: list[dict] | None, metric: str, labels: list[str]) -> dict[str, tuple[Interval, Interval]]:
    """A healed curve: per set label, (healed score - the unpruned model healed alike, healed score - the set's
    unhealed score), each with its paired interval over the probe sequences; sets without healed records left out."""
    wide = wide_of(records)
    if wide is None:
        return {}
    column, stat = statistic(metric)
    values = wide.column(column)
    reference = healed_label("")
    return {label: (paired_change(wide, column, stat, reference, healed_label(label)),
                    paired_change(wide, column, stat, label, healed_label(label)))
            for label in labels if values is not None and healed_label(label) in values}


def loglik_flags(table: Any) -> list[bool]:
    """`loglik_significant` of prune.csv rows that have a gold-loglikelihood interval; for a prune.csv written
    before that column, the same rule from the interval alone: p normal from its half-width / 1.96 (conservative
    where the interval is a t interval), Holm over the rows given."""
    if "loglik_significant" in table and "loglik_p_value" in table and table["loglik_p_value"].notna().all():
        return [bool(flag) for flag in table["loglik_significant"]]
    intervals = []
    for d, lo, hi in zip(table["loglik_delta"], table["loglik_lo"], table["loglik_hi"]):
        se = (hi - lo) / (2 * Z95)
        p = math.erfc(abs(d) / se / math.sqrt(2)) if se > 0 else (1.0 if d == 0 else 0.0)
        intervals.append(Interval(d, se, lo, hi, p))
    return corrected(intervals)


Z95 = 1.959963984540054  # the standard normal's 97.5% point


def change_interval(old: Wide, new: Wide, metric: str, task: str, groups: dict, label: str | None,
                    score_only: bool = False) -> Interval | None:
    """`compare`: the paired interval of the change between two runs scored on the same documents: of the unpruned
    score (label None), of a variant's score (score_only), or of its dP, (new pruned - new unpruned) - (old pruned -
    old unpruned), every document entering all four. None where either run lacks the records or they cover other
    documents."""
    column, stat = statistic(metric)
    a, b = old.column(column), new.column(column)
    wanted = [UNPRUNED] if label is None else [label] if score_only else [label, UNPRUNED]
    if a is None or b is None or any(w not in a or w not in b for w in wanted):
        return None
    tasks = sorted(set(a.index.get_level_values("task")))
    scope = _scope(metric, task, groups, tasks)
    a, b = (t[t.index.get_level_values("task").isin(scope)][wanted].dropna() for t in (a, b))
    if a.empty or len(a) != len(b) or not a.index.equals(b.index):
        return None
    # one term per (run, condition): the new run's conditions counted +, the old run's -, dP's unpruned reversed
    signs = [1.0] if len(wanted) == 1 else [1.0, -1.0]
    coefficients = [-s for s in signs] + signs
    values = [a[w] for w in wanted] + [b[w] for w in wanted]
    counts = None
    if stat.kind != "mean":
        ta, tb = (t.column("tokens").loc[a.index] for t in (old, new))
        counts = [ta[w].to_numpy() for w in wanted] + [tb[w].to_numpy() for w in wanted]
    strata = a.index.get_level_values("task").to_numpy()
    return contrast(stat, strata, [v.to_numpy() for v in values], coefficients, counts)


__all__ = ["CORRECTION", "UNPRUNED", "FILE", "add_intervals", "lm_eval_rows", "sequence_rows", "read", "write"]
