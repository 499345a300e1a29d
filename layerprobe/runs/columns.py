"""The columns of the CSVs a run writes, described once: name, meaning, unit, the short label the report prints,
and whether it is a cheap per-layer signal that `prune` correlates with dP. The angular pass writes layers.csv in
this order, the report reads the labels from here, prune picks its signals here, and docs/outputs.md prints it.

A new layers.csv column is one Column here and the code that computes it (commands/angular.py, angular_tables).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    meaning: str
    unit: str = ""
    label: str | None = None  # the report's header (None: the name); "" leaves it out of the report's table
    signal: str | None = None  # a cheap per-layer signal prune correlates with dP, by this name in its legend
    optional: bool = False  # measured only where it applies (NaN or empty elsewhere); the report shows it if present


LAYERS = (  # layers.csv, in the order it is written: row l describes x_l, the input of block l (the last row: the
    # last block's output); kinds and routing describe block l itself
    Column("layer", "l, 0-based; the last row is the last block's output"),
    Column("norm", "mean L2 norm of x_l", "activation units"),
    Column("variance", "mean per-position variance of x_l over hidden units", "activation units^2", label=""),
    Column("distance_next", "d(x_l, x_l+1) = arccos(cos)/pi, mean over positions", "[0, 1]", label="d(l, 1)"),
    Column("cos_input", "mean cosine of x_l with x_0", "[-1, 1]"),
    Column("tokens", "positions measured", "positions", label=""),
    Column("effective_rank", "exp(entropy of the normalized singular values) of x_l on up to 2,048 positions",
           "dimensions", optional=True),
    Column("block_influence", "ShortGPT's Block Influence of block l: 1 - mean cos(x_l, x_l+1)", "[0, 2]",
           label="BI", signal="Block Influence", optional=True),
    Column("logit_lens_kl", "mean KL(p_L || p_l): the model's own final norm and head on x_l against its output",
           "nats", label="lens KL", signal="logit-lens KL", optional=True),
    Column("layer_type", "the kind of block l (attention, mamba, sliding_attention, ...); empty for the last row",
           label="kind", optional=True),
    Column("router_entropy", "mixture of experts: mean routing entropy / ln E of block l", "[0, 1]",
           label="router H", optional=True),
    Column("expert_load", "mixture of experts: evenness of the experts' top-k load in block l", "[0, 1]",
           label="load", optional=True),
)
ANGULAR = (  # angular.csv: one row per block of n layers starting at l
    Column("layer", "l, the first block"),
    Column("n", "blocks spanned"),
    Column("distance", "d(x_l, x_l+n) = arccos(cos)/pi, mean over positions", "[0, 1]"),
    Column("tokens", "positions measured", "positions"),
)
TABLES = {"layers.csv": LAYERS, "angular.csv": ANGULAR}


def names(columns: tuple[Column, ...]) -> list[str]:
    return [c.name for c in columns]


def signals() -> dict[str, str]:
    """layers.csv column -> its name as a cheap signal (prune's correlations and legend)."""
    return {c.name: c.signal for c in LAYERS if c.signal}


def render_columns() -> str:
    """The CSV section of docs/outputs.md."""
    lines = []
    for table, columns in TABLES.items():
        lines += [f"## `{table}`", "", "| column | meaning | unit |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.meaning.replace('|', chr(92) + '|')} | {c.unit} |" for c in columns]
        lines.append("")
    return "\n".join(lines)
