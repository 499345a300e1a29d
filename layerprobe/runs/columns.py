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
    key: bool = False  # part of what identifies a row: never twice in one file (runs/read.py checks)
    number: bool = True  # holds numbers (NaN allowed unless `always`); read-back refuses text there
    always: bool = False  # a number always measured: NaN there makes a run unreadable for report and --angular


LAYERS = (  # layers.csv, in the order it is written: row l describes x_l, the input of block l (the last row: the
    # last block's output); kinds and routing describe block l itself
    Column("layer", "l, 0-based; the last row is the last block's output", key=True),
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
           label="kind", optional=True, number=False),
    Column("router_entropy", "mixture of experts: mean routing entropy / ln E of block l", "[0, 1]",
           label="router H", optional=True),
    Column("expert_load", "mixture of experts: evenness of the experts' top-k load in block l", "[0, 1]",
           label="load", optional=True),
)
ANGULAR = (  # angular.csv: one row per block of n layers starting at l
    Column("layer", "l, the first block", key=True),
    Column("n", "blocks spanned", key=True),
    Column("distance", "d(x_l, x_l+n) = arccos(cos)/pi, mean over positions", "[0, 1]", always=True),
    Column("tokens", "positions measured", "positions"),
)
PRUNE = (  # prune.csv (and a curve's scores.csv): one row per (variant, metric)
    Column("layer", "the first removed layer"),
    Column("block", "layers removed from it"),
    Column("removed", "the removed layers, 0-based, inclusive ranges", key=True, number=False),
    Column("metric", "the task's metric (lm-eval's name; acc/<subtask> for a group's members)", key=True, number=False),
    Column("baseline", "the unpruned model's score"),
    Column("pruned", "the score without the removed layers", always=True),
    Column("delta", "dP = pruned - baseline", always=True),
    Column("baseline_stderr", "lm-eval's standard error of the baseline, where it gives one"),
    Column("pruned_stderr", "lm-eval's standard error of the pruned score, where it gives one"),
)
PAIRED = (  # prune.csv and curve.csv: the paired interval of each dP from the per-document records (samples.csv.gz)
    Column("delta_stderr", "paired standard error of dP over the same documents (mean scores: sd of the per-document "
           "differences / sqrt(n), strata-weighted for a group; kl, drift: the ratio's linearized error; ppl: the sd "
           "of a paired bootstrap over sequences, seed 0, 2,000 resamples); empty without records"),
    Column("delta_lo", "lower end of dP's 95% interval (Student's t with n - 1 degrees of freedom; ppl: normal)"),
    Column("delta_hi", "upper end of dP's 95% interval"),
    Column("p_value", "two-sided p-value of dP = 0 before correction: McNemar's exact test for 0/1 scores (accuracy, "
           "exact match) over every document alike, else from the interval's statistic"),
    Column("significant", "dP differs from 0 after Holm's correction over the variants of this metric (family-wise "
           "error 0.05): the interval excludes 0 and survives the correction", number=False),
    Column("loglik_delta", "multiple choice: mean change of the gold answer's loglikelihood (acc rows; acc_norm rows: "
           "per character, as acc_norm normalizes), nats", "nats", optional=True),
    Column("loglik_lo", "lower end of its paired 95% interval", "nats", optional=True),
    Column("loglik_hi", "upper end of its paired 95% interval", "nats", optional=True),
    Column("loglik_p_value", "two-sided p-value of loglik_delta = 0 before correction (Student's t over the "
           "per-document differences)", optional=True),
    Column("loglik_significant", "loglik_delta differs from 0 after Holm's correction over the variants of this "
           "metric, as `significant` decides for dP (False without an interval)", number=False, optional=True),
)
RECORDS = (  # samples.csv.gz: one row per (variant, document); the unpruned model's rows once
    Column("removed", "the variant's removed layers (prune.csv's removed), or 'unpruned'; a healed curve's sets as '<removed> healed' and 'unpruned healed'", key=True, number=False),
    Column("task", "the lm-eval task (a group's subtask) the document belongs to; squad; ppl, kl or drift",
           key=True, number=False),
    Column("doc_id", "lm-eval's doc_id; the question's position (squad); the packed sequence's position (ppl, kl, "
           "drift)", key=True),
    Column("gold", "multiple choice: the gold choice's index", optional=True),
    Column("chosen", "multiple choice: the choice of highest loglikelihood (acc's pick)", optional=True),
    Column("chosen_norm", "multiple choice: the choice of highest loglikelihood per character (acc_norm's pick)",
           optional=True),
    Column("gold_loglik", "multiple choice: the gold choice's loglikelihood", "nats", optional=True),
    Column("gold_loglik_norm", "multiple choice: the gold choice's loglikelihood per character", "nats",
           optional=True),
    Column("tokens", "ppl, kl, drift: positions of the sequence", optional=True),
    Column("total", "ppl, kl, drift: the sequence's sum over its positions (next-token NLL, KL, 1 - cos); the score is "
           "sum(total) / sum(tokens) over the sequences (ppl: its exp)", optional=True),
    Column("<metric>", "each per-document metric of the task, by lm-eval's name (acc, acc_norm, exact_match, ...; "
           "squad: exact_match and f1 on the 0-100 scale): the score is their mean", optional=True),
)
CURVE = (  # curve.csv: one row per (strategy, k)
    Column("strategy", "the strategy that chose the layers (strategies.py)", key=True, number=False),
    Column("k", "layers removed", key=True),
    Column("fraction", "k over the model's layers"),
    Column("removed", "the layers it removed", number=False),
    Column("metric", "the scored metric", key=True, number=False),
    Column("baseline", "the unpruned model's score"),
    Column("score", "the score without those layers"),
    Column("delta", "score - baseline"),
    Column("within", "the score (--keep-by bound: the worse end of its paired 95% interval) is within the --keep "
           "tolerance", number=False),
    Column("healed_score", "--heal-steps: the score after healing those layers' removal with LoRA (empty without)",
           optional=True),
)
CURVE_HEALED = (  # curve.csv with --heal: paired intervals over the probe sequences, from the healed records
    Column("healed_delta", "--heal: healed_score - the unpruned model healed alike (summary.json healed_baseline)",
           optional=True),
    Column("healed_delta_lo", "lower end of its paired 95% interval (as delta_lo)", optional=True),
    Column("healed_delta_hi", "upper end of its paired 95% interval", optional=True),
    Column("heal_change", "--heal: healed_score - score, what the repair changed (kl, ppl: negative is better)",
           optional=True),
    Column("heal_change_lo", "lower end of its paired 95% interval", optional=True),
    Column("heal_change_hi", "upper end of its paired 95% interval", optional=True),
)
GRADNORM = (  # gradnorm.csv: means over seeds and batches
    Column("norm", "the normalization placement", key=True, number=False),
    Column("layer", "block l", key=True),
    Column("kind", "params (the block's parameters) or input (its input's gradient)", key=True, number=False),
    Column("module", "block, or a sub-module of it", key=True, number=False),
    Column("grad_norm", "L2 norm of the gradient, mean over seeds and batches", always=True),
    Column("std", "its standard deviation over seeds and batches"),
    Column("samples", "seeds x batches averaged"),
    Column("step", "the training step measured (0: at initialization)", key=True),
)
TOY = (  # toy.csv: the residual-MLP model by depth
    Column("norm", "the normalization placement", number=False),
    Column("alpha", "the branch scale"),
    Column("layer", "block l"),
    Column("hidden_norm", "mean ||h_l||"),
    Column("cos_next", "mean cos(h_l, h_l+1)"),
    Column("cos_input", "mean cos(h_l, h_0)"),
    Column("effective_rank", "effective rank of h_l"),
    Column("grad_norm", "gradient norm of block l's parameters"),
)
VARIANCE = (  # variance.csv: the output variance of each block
    Column("norm", "the normalization placement", key=True, number=False),
    Column("step", "the training step measured", key=True),
    Column("layer", "block l", key=True),
    Column("variance", "variance of block l's output over hidden units, mean over seeds and batches"),
    Column("std", "its standard deviation"),
    Column("samples", "seeds x batches averaged"),
)
MONITOR = (  # monitor.csv (layerprobe.integrations): one row per (measured step, x_l)
    Column("step", "optimizer steps taken when measured (the step training started from: no gradient yet)", key=True),
    Column("layer", "l, 0-based; the last row is the last block's output", key=True),
    Column("distance_next", "d(x_l, x_l+1) = arccos(cos)/pi on the probe batches, mean over positions", "[0, 1]",
           label="d(l, 1)"),
    Column("block_influence", "Block Influence of block l: 1 - mean cos(x_l, x_l+1)", "[0, 2]", label="BI"),
    Column("norm", "mean L2 norm of x_l", "activation units"),
    Column("variance", "mean per-position variance of x_l over hidden units", "activation units^2"),
    Column("grad_norm", "L2 norm of block l's parameter gradients from that step's own backward, as the optimizer "
           "takes them (after the Trainer's clipping); empty at the start step and in the last row", optional=True,
           label="grad norm"),
    Column("tokens", "probe positions measured", "positions", label=""),
)
TRAINING = (  # training.csv (gradnorm --steps): monitor.csv's measurement of each (placement, seed) while it trains
    Column("placement", "the normalization placement (gradnorm.csv's norm)", key=True, number=False),
    Column("seed", "the initialization", key=True),
    *MONITOR,
)
HEAL = (  # heal.csv: one row per training step, and step 0 (before healing)
    Column("step", "AdamW updates done (0: before healing; --method lstsq|cosine: 1, the maps folded)", key=True),
    Column("loss", "the step's training loss (lm: next-token cross-entropy; distill: KL(unpruned || shortened)) "
           "on its batch, before its update; empty at step 0", "nats"),
    Column("lr", "the learning rate of the step's update"),
    Column("heldout_ppl", "perplexity of the healed model on the held-out text, every --eval-every steps (else empty)"),
    Column("heldout_kl", "mean KL(unpruned || healed) of next-token distributions on the held-out text, every "
           "--eval-every steps (else empty)", "nats"),
)
REPLACE = (  # replace.csv (heal --method lstsq|cosine): one row per removed run of blocks, fitted in order
    Column("run", "the removed run, first-last (0-based, inclusive)", key=True, number=False),
    Column("first", "its first block"),
    Column("last", "its last block"),
    Column("folded_into", "the projection the map T was folded into (the MLP output of block first-1)", number=False),
    Column("tokens", "calibration positions the map was fitted on", "positions"),
    Column("mse_removed", "mean over positions of ||x_in - x_out||^2: what plain removal leaves (T = I)"),
    Column("mse_fitted", "mean over positions of ||x_in - m + m T - x_out||^2 with the fitted T"),
    Column("cosine_removed", "mean of 1 - cos(x_in, x_out): plain removal"),
    Column("cosine_fitted", "mean of 1 - cos(x_in - m + m T, x_out) with the fitted T"),
    Column("cosine_lstsq", "--method cosine: the cosine objective of the lstsq start (empty for lstsq)"),
    Column("cosine_kept_lstsq", "--method cosine: True where no Adam step improved on the lstsq start, so the "
           "lstsq map was kept (empty for lstsq)", number=False),
    Column("seconds", "wall time of the capture, the fit and the fold", "s"),
)
CURVE_PAIRED = tuple(c for c in PAIRED if c.name in ("delta_stderr", "delta_lo", "delta_hi", "p_value", "significant"))
TABLES = {"layers.csv": LAYERS, "angular.csv": ANGULAR, "prune.csv": PRUNE + PAIRED, "scores.csv": PRUNE + PAIRED,
          "curve.csv": CURVE + CURVE_PAIRED + CURVE_HEALED, "samples.csv.gz": RECORDS,
          "gradnorm.csv": GRADNORM, "variance.csv": VARIANCE, "toy.csv": TOY, "heal.csv": HEAL, "replace.csv": REPLACE,
          "monitor.csv": MONITOR, "training.csv": TRAINING}


def names(columns: tuple[Column, ...]) -> list[str]:
    return [c.name for c in columns]


def signals() -> dict[str, str]:
    """layers.csv column -> its name as a cheap signal (prune's correlations and legend)."""
    return {c.name: c.signal for c in LAYERS if c.signal}


def render_columns() -> str:
    """The CSV section of docs/outputs.md."""
    lines = []
    for table, columns in TABLES.items():
        if table == "scores.csv":
            continue  # prune.csv's columns
        if table == "samples.csv.gz":
            lines += ["## `samples.csv.gz`", "", "Per-document records of every scored sweep (`prune`, `prune --curve` and its healed sets, "
                      "`merge`): one row per (variant, document), the unpruned model's rows once, gzip-compressed "
                      "CSV. prune.csv's and curve.csv's intervals are computed from them; a score reproduced from "
                      "them matches prune.csv's to 1e-9, or its interval is left empty.", ""]
            lines += ["| column | meaning | unit |", "|---|---|---|"]
            lines += [f"| `{c.name}` | {c.meaning.replace('|', chr(92) + '|')} | {c.unit} |" for c in columns]
            lines.append("")
            continue
        lines += [f"## `{table}`", "", "| column | meaning | unit |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.meaning.replace('|', chr(92) + '|')} | {c.unit} |" for c in columns]
        lines.append("")
    return "\n".join(lines)
