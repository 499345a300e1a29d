"""The columns of the CSVs a run writes, described once: name, meaning, unit, the short label the report prints,
and whether it is a cheap per-layer signal that `prune` correlates with dP. Each command's record (its package's
__init__.py) lists its files' columns (a `Table` where docs/outputs.md says more of the file, or lists its columns
under another file's) and `register` fills TABLES from them; runs/read.py checks a file read back by them, the
report reads the labels, and docs/outputs.md prints them.

The two tables several commands read stay here: layers.csv (written by angular; prune picks its signals from it,
curve and the report read it) and monitor.csv (layerprobe.integrations; gradnorm's training.csv is built on it). A
new layers.csv column is one Column here and the code that computes it (commands/angular/run.py, angular_tables).
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.registry import Registry


@dataclass(frozen=True)
class Column:
    name: str
    meaning: str
    unit: str = ""
    label: str | None = None  # the report's header (None: the name); "" leaves it out of the report's table
    signal: str | None = None  # a cheap per-layer signal prune correlates with dP, by this name in its legend
    optional: bool = False  # measured only where it applies (NaN or empty elsewhere); the report shows it if present
    key: bool = False  # part of what identifies a row: never twice in one file (runs/read.py checks)
    number: bool = True  # holds numbers (NaN allowed unless `always`); read-back refuses text there
    always: bool = False  # a number always measured: NaN there makes a run unreadable for report and --angular
    gaps: bool = False  # a number left empty in the rows where it is not measured (the last row's d(l, l+1), an
    # interval from too few documents, a spread of one sample); a number column neither `optional` nor `gaps` is a
    # finite number in every row, and none holds infinity or a written-out NaN (runs/read.py check_finite)
    whole: bool = False  # a count or an index (layer, k, tokens, step): a finite whole number >= 0 in every row (or,
    # where `optional`, empty); runs/read.py refuses 1.5, -1, NaN or infinity there, naming file, row and column
    words: tuple[str, ...] = ()  # a text column that holds one of these words in every row (or, where `optional`,
    # nothing): runs/read.py refuses any other text, NaN included, naming file, row and column
    compare: str = "scale"  # how `compare` judges it (runs/compare_columns.py, COMPARE_RULES): scale, relative,
    # absolute, exact, derived, probability; a `whole` column is always exact


YES_NO = ("True", "False")  # the words of a yes/no column (pandas writes a bool so)


LAYERS = (  # layers.csv, in the order it is written: row l describes x_l, the input of block l (the last row: the
    # last block's output); kinds and routing describe block l itself
    Column("layer", "l, 0-based; the last row is the last block's output", key=True, whole=True),
    Column("norm", "mean L2 norm of x_l", "activation units"),
    Column("variance", "mean per-position variance of x_l over hidden units", "activation units^2", label=""),
    Column("distance_next", "d(x_l, x_l+1) = arccos(cos)/pi, mean over positions", "[0, 1]", label="d(l, 1)",
           gaps=True, compare="absolute"),
    Column("cos_input", "mean cosine of x_l with x_0", "[-1, 1]", compare="absolute"),
    Column("tokens", "positions measured", "positions", label="", whole=True),
    Column("effective_rank", "exp(entropy of the normalized singular values) of x_l on up to 2,048 positions",
           "dimensions", optional=True),
    Column("block_influence", "ShortGPT's Block Influence of block l: 1 - mean cos(x_l, x_l+1)", "[0, 2]",
           label="BI", signal="Block Influence", optional=True, compare="absolute"),
    Column("logit_lens_kl", "mean KL(p_L || p_l): the model's own final norm and head on x_l against its output",
           "nats", label="lens KL", signal="logit-lens KL", optional=True),
    Column("layer_type", "the kind of block l (attention, mamba, sliding_attention, ...); empty for the last row",
           label="kind", optional=True, number=False),
    Column("router_entropy", "mixture of experts: mean routing entropy / ln E of block l", "[0, 1]",
           label="router H", optional=True, compare="absolute"),
    Column("expert_load", "mixture of experts: evenness of the experts' top-k load in block l", "[0, 1]",
           label="load", optional=True, compare="absolute"),
)
MONITOR = (  # monitor.csv (layerprobe.integrations): one row per (measured step, x_l)
    Column("step", "optimizer steps taken when measured (the step training started from: no gradient yet)", key=True,
           whole=True),
    Column("layer", "l, 0-based; the last row is the last block's output", key=True, whole=True),
    Column("distance_next", "d(x_l, x_l+1) = arccos(cos)/pi on the probe batches, mean over positions", "[0, 1]",
           label="d(l, 1)", gaps=True, compare="absolute"),
    Column("block_influence", "Block Influence of block l: 1 - mean cos(x_l, x_l+1)", "[0, 2]", label="BI",
           gaps=True, compare="absolute"),
    Column("norm", "mean L2 norm of x_l", "activation units"),
    Column("variance", "mean per-position variance of x_l over hidden units", "activation units^2"),
    Column("grad_norm", "L2 norm of block l's parameter gradients from that step's own backward, as the optimizer "
           "takes them (after the Trainer's clipping); empty at the start step and in the last row", optional=True,
           label="grad norm"),
    Column("tokens", "probe positions measured", "positions", label="", whole=True),
)


@dataclass(frozen=True)
class Table:
    """A CSV file as docs/outputs.md shows it: its columns, a paragraph above them, or no section of its own."""

    columns: tuple[Column, ...]
    intro: str = ""  # a paragraph between the file's heading and its columns
    same_as: str | None = None  # the file whose section lists these columns: this one gets no section


TABLES: dict[str, Table] = Registry("CSV table")  # CSV file -> its Table, filled by layerprobe.commands.register from the commands'
# records (a record may give a file's columns alone), in registration order (docs/outputs.md's)


FILES: dict[str, tuple[str, ...]] = {}  # run kind -> the files its command's record declares (register): compare
# walks each CSV of them (runs/compare_columns.py)


def names(columns: tuple[Column, ...]) -> list[str]:
    return [c.name for c in columns]


def signals() -> dict[str, str]:
    """layers.csv column -> its name as a cheap signal (prune's correlations and legend)."""
    return {c.name: c.signal for c in LAYERS if c.signal}


def render_columns() -> str:
    """The CSV section of docs/outputs.md."""
    lines = []
    for file, table in TABLES.items():
        if table.same_as:
            continue  # another file's columns, documented in that file's section
        lines += [f"## `{file}`", ""] + ([table.intro, ""] if table.intro else [])
        lines += ["| column | meaning | unit |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.meaning.replace('|', chr(92) + '|')} | {c.unit} |" for c in table.columns]
        lines.append("")
    return "\n".join(lines)
