"""`layerprobe prune`: remove one layer or a block at a time and measure the drop (run.py), or --curve: removal
curves by strategy (curve.py); and the records of both run kinds (prune and curve)."""

from __future__ import annotations

from typing import Any

from layerprobe.commands.record import Command, part_suffix
from layerprobe.config import CurveSettings, PruneConfig
from layerprobe.evaluation.variants import shard_suffix
from layerprobe.runs.columns import YES_NO, Column, Table
from layerprobe.runs.folder import slug
from layerprobe.runs.keys import CORPUS, FLAG, INTEGER, LIST, MAPPING, MODEL, NUMBER, RUN, TEXT, Key
from layerprobe.runs.kinds import Kind, Tolerance

PRUNE = (  # prune.csv (and a curve's scores.csv): one row per (variant, metric)
    Column("layer", "the first removed layer", whole=True),
    Column("block", "layers removed from it", whole=True),
    Column("removed", "the removed layers, 0-based, inclusive ranges", key=True, number=False),
    Column("metric", "the task's metric (lm-eval's name; acc/<subtask> for a group's members)", key=True, number=False),
    Column("baseline", "the unpruned model's score"),
    Column("pruned", "the score without the removed layers", always=True,
           compare="derived:baseline+delta"),
    Column("delta", "dP = pruned - baseline", always=True),
    Column("baseline_stderr", "lm-eval's standard error of the baseline, where it gives one", gaps=True, compare="relative"),
    Column("pruned_stderr", "lm-eval's standard error of the pruned score, where it gives one", gaps=True, compare="relative"),
)
PAIRED = (  # prune.csv and curve.csv: the paired interval of each dP from the per-document records (samples.csv.gz)
    Column("delta_stderr", "paired standard error of dP over the same documents (mean scores: sd of the per-document "
           "differences / sqrt(n), strata-weighted for a group; kl, drift: the ratio's linearized error; ppl: the sd "
           "of a paired bootstrap over sequences, seed 0, 2,000 resamples); empty without records", gaps=True,
           compare="relative"),
    Column("delta_lo", "lower end of dP's 95% interval, inside the range the score can take (Student's t with n - 1 "
           "degrees of freedom; ppl: the paired bootstrap's expanded percentile interval, each end the change on one "
           "resample of the sequences; a 0/1 score over fewer than 30 documents, with none changed or where t "
           "would leave [-baseline, 1 - baseline]: Newcombe's paired score interval; kl, drift from the unpruned 0: "
           "the pruned score's interval on the log (drift: logit) scale, never below 0)", gaps=True),
    Column("delta_hi", "upper end of dP's 95% interval", gaps=True),
    Column("p_value", "two-sided p-value of dP = 0 before correction: McNemar's exact test for 0/1 scores (accuracy, "
           "exact match) over every document alike; ppl: the paired t test of the mean NLL (equal exactly when "
           "the ppls are); else from the interval's statistic", compare="probability", gaps=True),
    Column("significant", "dP differs from 0 after Holm's correction over its family (family-wise error 0.05; "
           "--family main, the default: the variants of the summary's metric, every other row exploratory and "
           "never flagged; --family all: every row with an interval): the interval excludes 0 and survives the "
           "correction", number=False, words=YES_NO),
    Column("family", "the number of tests in the Holm family of `significant` (0: the row is exploratory, "
           "outside the family, read its interval only)", whole=True),
    Column("loglik_delta", "multiple choice: mean change of the gold answer's loglikelihood (acc rows; acc_norm rows: "
           "per character, as acc_norm normalizes), nats", "nats", optional=True),
    Column("loglik_lo", "lower end of its paired 95% interval", "nats", optional=True),
    Column("loglik_hi", "upper end of its paired 95% interval", "nats", optional=True),
    Column("loglik_p_value", "two-sided p-value of loglik_delta = 0 before correction (Student's t over the "
           "per-document differences)", optional=True, compare="probability"),
    Column("loglik_significant", "loglik_delta differs from 0 after Holm's correction over the same family's "
           "gold-loglikelihood changes, as `significant` decides for dP (False without an interval)", number=False,
           optional=True, words=YES_NO),
    Column("margin_delta", "multiple choice, acc rows: mean change of the margin, the gold choice's loglikelihood "
           "minus the best wrong choice's (from the records' choice_loglik_<i>; acc_norm rows: of the loglikelihoods "
           "per character, choice_loglik_<i> / choice_chars_<i>, as acc_norm compares them): it falls when the model "
           "gets less sure of the right answer, not when every choice gets less likely alike", "nats", optional=True),
    Column("margin_lo", "lower end of its paired 95% interval", "nats", optional=True),
    Column("margin_hi", "upper end of its paired 95% interval", "nats", optional=True),
    Column("margin_p_value", "two-sided p-value of margin_delta = 0 before correction", optional=True,
           compare="probability"),
    Column("margin_significant", "margin_delta differs from 0 after Holm's correction over the same family's margin "
           "changes (False without an interval)", number=False, optional=True, words=YES_NO),
)
KINDS = (  # prune.csv's last column where the model's blocks differ in kind (layer_types in its config)
    Column("layer_type", "the kind of the removed layer(s) (attention, mamba, sliding_attention, ...; '+' joins "
           "several); written where the config names each layer's kind", optional=True, number=False),
)
RECORDS = (  # samples.csv.gz: one row per (variant, document); the unpruned model's rows once
    Column("removed", "the variant's removed layers (prune.csv's removed), or 'unpruned'; a healed curve's sets as '<removed> healed' and 'unpruned healed'", key=True, number=False),
    Column("task", "the lm-eval task (a group's subtask) the document belongs to; squad; ppl, kl or drift",
           key=True, number=False),
    Column("doc_id", "lm-eval's doc_id; the question's position (squad); the packed sequence's position (ppl, kl, "
           "drift)", key=True, whole=True),
    Column("gold", "multiple choice: the gold choice's index", optional=True, whole=True),
    Column("chosen", "multiple choice: the choice of highest loglikelihood (acc's pick)", optional=True, whole=True),
    Column("chosen_norm", "multiple choice: the choice of highest loglikelihood per character (acc_norm's pick)",
           optional=True, whole=True),
    Column("gold_loglik", "multiple choice: the gold choice's loglikelihood", "nats", optional=True),
    Column("gold_loglik_norm", "multiple choice: the gold choice's loglikelihood per character", "nats",
           optional=True),
    Column("choice_loglik_<i>", "multiple choice: the loglikelihood of choice i (0-based; lm-eval's own per-choice "
           "loglikelihood; empty past a document's last choice)", "nats", optional=True),
    Column("choice_chars_<i>", "multiple choice: the length of choice i in characters, what acc_norm divides its "
           "loglikelihood by (empty past a document's last choice)", optional=True, whole=True),
    Column("tokens", "ppl, kl, drift: positions of the sequence", optional=True, whole=True),
    Column("total", "ppl, kl, drift: the sequence's sum over its positions (next-token NLL, KL, 1 - cos); the score is "
           "sum(total) / sum(tokens) over the sequences (ppl: its exp)", optional=True),
    Column("<metric>", "each per-document metric of the task, by lm-eval's name (acc, acc_norm, exact_match, ...; "
           "squad: exact_match and f1 on the 0-100 scale): the score is their mean", optional=True),
)
CURVE = (  # curve.csv: one row per (strategy, k)
    Column("strategy", "the strategy that chose the layers (strategies.py)", key=True, number=False),
    Column("k", "layers removed", key=True, whole=True),
    Column("fraction", "k over the model's layers", compare="exact"),
    Column("removed", "the layers it removed", number=False),
    Column("metric", "the scored metric", key=True, number=False),
    Column("baseline", "the unpruned model's score"),
    Column("score", "the score without those layers"),
    Column("delta", "score - baseline", compare="derived:score-baseline"),
    Column("within", "the score (--keep-by bound: the worse end of its paired 95% interval) is within the --keep "
           "tolerance", number=False, words=YES_NO),
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
CURVE_PAIRED = tuple(c for c in PAIRED if c.name in ("delta_stderr", "delta_lo", "delta_hi", "p_value", "significant",
                                                     "family"))

CORPUS_SOME = tuple(Key(k.name, k.types, f"ppl/kl/drift (dataset: squad too): {k.meaning}", required=False,
                        optional=k.optional) for k in CORPUS)
SWEEP_FACTS = (  # what each kind of prune task adds (commands/prune/sweeps.py, facts)
    Key("questions", INTEGER, "squad: questions scored", required=False),
    Key("windows", INTEGER, "squad: context windows scored", required=False),
    Key("limit", NUMBER, "lm-eval/squad: --limit", required=False, optional=True),
    Key("sample", MAPPING, "lm-eval --sample N --seed S: n, seed, draw (how each task's documents were drawn, in words) and "
        "documents (task -> the sampled documents' lm-eval doc_ids, ascending); null with --limit or every document",
        required=False, optional=True),
    Key("max_length", INTEGER, "squad: window length", required=False),
    Key("doc_stride", INTEGER, "squad: window stride", required=False),
    Key("num_fewshot", INTEGER, "lm-eval: the few-shot examples it used per question (--num-fewshot, else the task's "
        "default; null: its tasks use different counts, see num_fewshot_by_task)", required=False, optional=True),
    Key("num_fewshot_by_task", MAPPING, "lm-eval: each task's few-shot count as used", required=False, optional=True),
    Key("seed", INTEGER, "lm-eval: seed", required=False),
    Key("fewshot_seed", INTEGER, "lm-eval: few-shot sampling seed", required=False),
    Key("shared_prefix", MAPPING, "lm-eval: the shared-prefix batch (batch_size, longest_tokens, gib_per_sequence, "
        "budget_gib), null when each variant ran on its own", required=False, optional=True),
    Key("prefix_cache", MAPPING, "lm-eval: which path scored the requests (path: 'prefix cache', 'shared layers' or 'per "
        "variant', and the reason when not the prefix cache), the groups of rows sharing a few-shot prefix (groups, "
        "rows, prefix_tokens, over_memory: groups scored whole to fit --max-memory), and the block-tokens computed "
        "(block_tokens) next to what per-variant lm-eval computes for the same rows (naive_block_tokens); counts "
        "are this process's (merge: the shards' summed)", required=False, optional=True),
    Key("mmlu_data", TEXT, "--mmlu-data file", required=False, optional=True),
    Key("task_data", TEXT, "lm-eval: the local copies of the datasets the tasks read (null: the hub)", required=False,
        optional=True),
    Key("splits", MAPPING, "lm-eval: per task, the split scored, its documents and how many of them were scored (--limit)",
        required=False),
    Key("shard", MAPPING, "--shard K/N: index, count, sweep_variants, variants", required=False),
    Key("groups", MAPPING, "lm-eval: each group and the leaf tasks under it (the documents of a group's metric in the "
        "records)", required=False, optional=True),
    Key("records", TEXT, "the per-document records file (samples.csv.gz), null when the sweep wrote none",
        required=False, optional=True),
    Key("correction", TEXT, "the multiple-testing correction of `significant` in the CSVs: holm (Holm's step-down over "
        "the variants of each metric, family-wise error 0.05)", required=False),
)
DECISIONS = (  # what each run's sentences are tested by (commands/prune/decide.py); absent in runs before them
    Key("documents", INTEGER, "documents (questions, sequences) the unpruned model's records hold for the metric (0: no "
        "records)", required=False),
    Key("min_documents", INTEGER, "below this many documents the findings rank but do not test ('too few documents to "
        "test')", required=False),
    Key("family", MAPPING, "the Holm family of the `significant` flags: name (main or all, --family), metric, size (tests "
        "in it), rule", required=False, optional=True),
    Key("detectable", MAPPING, "per metric (and 'gold loglikelihood'), the minimum detectable effect: the smallest true "
        "change seen with 80% power at the family's Holm-worst level alpha / size, (z_{1 - level/2} + z_0.8) x the "
        "median paired stderr over the variants; documents, stderr, family, level, power, change (null, with why, "
        "where the stderr is 0: no minimum detectable effect is claimed)", required=False),
    Key("chance_test", MAPPING, "multiple choice: the unpruned score and every variant against chance, an exact two-sided "
        "binomial test each (chance, baseline: correct, n, p; variants_at_chance: the variants it cannot tell from "
        "chance; p per variant); null for other tasks", required=False, optional=True),
    Key("interval_estimand", MAPPING, "which standard error the main metric's intervals and Holm flags carry (--cluster): "
        "name (clustered: cluster-robust by subtask, CR1, t with G - 1 df; stratified: subtasks as fixed strata; "
        "documents: one task), cluster (the setting), subtasks, df, min_clusters (--cluster subtask clusters a group "
        "of at least this many subtasks), words; null without records or for ppl, kl, drift", required=False,
        optional=True),
    Key("rederived", MAPPING, "present when the decisions were recomputed from the records by a later layerprobe "
        "(commands/prune/rederive.py): version and what was recomputed", required=False, optional=True),
)
PRUNE_COMMON = (
    Key("task", TEXT, "--task"),
    Key("part", TEXT, "block, attn or mlp"),
    Key("sublayer", TEXT, "how --part attn|mlp removed a sub-layer: branch (zeroed, norms kept) or module (skipped, its own norm too)", required=False),
    Key("metric", TEXT, "the metric of the summary and the plot"),
    Key("higher_is_better", FLAG, "the metric's direction"),
    Key("baseline", NUMBER, "the unpruned model's score", optional=True),
    Key("angular_run", TEXT, "the angular run of the same model used for the correlations", optional=True),
)

PRUNE_SUMMARY = RUN + MODEL + CORPUS_SOME + PRUNE_COMMON + SWEEP_FACTS + (
    Key("block", INTEGER, "layers removed per variant"),
    Key("variants", INTEGER, "variants scored"),
    Key("least_important", LIST, "the variants whose removal costs least by point estimate (at most 3, or one "
        "larger tie; a tie is never cut, and [] where every removal ties)"),
    Key("most_important", LIST, "the variants whose removal costs most by point estimate (at most 3, or one "
        "larger tie; never cut, never a variant of least_important, [] where every removal ties)"),
    Key("spearman_angular_delta", NUMBER, "Spearman(d(l, block), dP) with the angular run", optional=True),
    Key("spearman_delta", MAPPING, "Spearman of each cheap signal of the angular run with dP"),
    Key("significant", LIST, "the variants whose dP on the summary's metric is significant (paired 95% interval, "
        "Holm's correction), costliest first; empty without records", required=False),
    Key("clustered", MAPPING, "a task of several subtasks (MMLU): subject-clustered paired intervals (CR1, t with G - 1 "
        "df) beside prune.csv's stratified ones, for the metric and the gold loglikelihood: clusters, per label "
        "measurable (Holm over the same family), intervals (removed -> [change, lo, hi, p]) and "
        "stderr_ratio_median (clustered over stratified), and stratified_measurable (the stratified verdicts); with "
        "fewer subtasks than --cluster subtask needs, only clusters and why (no interval claimed); null otherwise", required=False, optional=True),
    Key("signal_test", MAPPING, "which cheap signal to trust: the best-predicting signal against the runner-up, rho(best, "
        "cost) - rho(other, cost) with a percentile bootstrap over layers (resamples, seed; separates: the interval "
        "excludes 0); null with fewer than two signals or five layers", required=False, optional=True),
) + DECISIONS
CURVE_SUMMARY = RUN + MODEL + CORPUS_SOME + PRUNE_COMMON + SWEEP_FACTS + (
    Key("chance", NUMBER, "the task's chance accuracy, where known", optional=True),
    Key("keep", NUMBER, "--keep: the tolerance rule's share"),
    Key("keep_by", TEXT, "--keep-by: what the tolerance judged, point (the score) or bound (the worse end of its "
        "paired 95% interval)", required=False),
    Key("max_removed", INTEGER, "largest k"),
    Key("strategies", LIST, "the strategies scored"),
    Key("greedy_metric", TEXT, "what greedy minimized", optional=True),
    Key("greedy_ends", TEXT, "greedy: keep (never the first or last remaining block, SLEB's rule) or allow",
        optional=True),
    Key("sets_scored", INTEGER, "distinct layer sets scored"),
    Key("heal_steps", INTEGER, "--heal-steps: LoRA steps healing each scored set (0: none)", required=False),
    Key("heal", TEXT, "--heal: how each scored set was repaired (lstsq, cosine, lora, tail; null: not repaired)",
        required=False, optional=True),
    Key("heal_seconds", NUMBER, "--heal: wall time of all the repairs and their scoring in this run (a resumed run: "
        "the part after the resume)", required=False, optional=True),
    Key("healed_baseline", NUMBER, "--heal-steps: the unpruned model healed the same way, on the same text (the "
        "healed curves' fair reference: the healing also adapts a model with every layer to the corpus)",
        required=False, optional=True),
    Key("curve", MAPPING, "per strategy: max_k that can go under --keep-by, the layers removed and the score; bound: "
        "next_k, the first k that failed, and next_needed, the documents it would need to pass if its change and "
        "spread held (null: its point is outside the tolerance, no number of documents helps)"),
    Key("keep_rule", TEXT, "the rule `curve` was decided by, in words (bound: non-inferiority with its level; point: "
        "exploratory)", required=False),
    Key("keep_level", NUMBER, "--keep-by bound: the one-sided level of the non-inferiority bound (0.975); null for point",
        required=False, optional=True),
    Key("strategy_test", MAPPING, "which strategy is best: the candidate (most layers that can go) against each other "
        "strategy, a paired test at each k where their sets differ on the same documents, Holm over the k's "
        "compared (against: compared, better_at, worse_at, smallest_adjusted_p); clustered: true where the run's "
        "intervals are cluster-robust by subtask and so is each test (CR1, t with G - 1 df), else McNemar's exact "
        "test or the paired t; best: the candidate when it is measurably better than every other, else null; null "
        "without records", required=False, optional=True),
) + DECISIONS
READ = f"{__name__}.read:"  # read.py: prune runs' findings, per-layer table, overlay and comparer (first use)
READ_CURVE = f"{__name__}.read_curve:"  # read_curve.py: curve runs' findings, table and comparer
PRUNE_KIND = Kind("prune", (("prune.csv", True),), "prune.png", "Pruning: performance drop per layer",
                  (("normalization", "placement"), ("task", "task"), ("metric", "metric"), ("block", "block")),
                  READ + "prune_findings", READ + "prune_table", READ + "compare_prune", label_key="task",
                  overlay=READ + "prune_by_depth", config_class=PruneConfig, wide_past=16, reads=("metric",),
                  overlay_axis=("rank of the cost (0 = cheapest)",
                                "Cost of removing each layer, ranked within each run, by relative depth"),
                  tolerances=(Tolerance("prune", 0.05, "change of the baseline score in the bad direction or of any "
                                        "dP, as a fraction of the baseline score's magnitude, or of the largest |dP| "
                                        "when larger: kl, drift; a curve's score at each (strategy, k) as a fraction "
                                        "of that row's |baseline| or |delta|; every other number prune.csv and "
                                        "curve.csv (and scores.csv) declare, row by row: scores and interval bounds "
                                        "as a fraction of the row's |baseline|, |delta| or own value, standard errors "
                                        "as a fraction of their own value, p-values as an "
                                        "absolute change; counts, k / layers and the derived pruned = baseline + "
                                        "delta must match exactly"),))
CURVE_KIND = Kind("curve", (("curve.csv", True), ("scores.csv", False)), "curve.png",
                  "Removal curves: the score as more layers go, by strategy",
                  (("normalization", "placement"), ("task", "task"), ("metric", "metric"), ("part", "part"),
                   ("keep", "keep")),
                  READ_CURVE + "curve_findings", READ_CURVE + "curve_table", READ_CURVE + "compare_curve",
                  label_key="task", label_word="curve", config_class=PruneConfig, reads=("metric",),
                  check=READ_CURVE + "whole_curves", words="prune --curve", compared_with=("prune",))


def prune_folder(config: Any) -> str:
    """prune-<task>[-attn|-mlp][-shard-K-of-N]."""
    return f"prune-{slug(config.task)}{part_suffix(config)}{shard_suffix(config.shard)}"


def curve_folder(config: Any) -> str:
    """curve-<task>[-attn|-mlp] (a curve takes no --shard)."""
    return f"curve-{slug(config.task)}{part_suffix(config)}"


SAMPLES = Table(RECORDS, intro="Per-document records of every scored sweep (`prune`, `prune --curve` and its healed "
                "sets, `merge`): one row per (variant, document), the unpruned model's rows once, gzip-compressed CSV. "
                "prune.csv's and curve.csv's intervals are computed from them; a score reproduced from them matches "
                "prune.csv's to 1e-9, or its interval is left empty.")
SCORES = Table(PRUNE + PAIRED + KINDS, same_as="prune.csv")  # a curve's scores.csv: each scored set as prune.csv has it

PRUNE_COMMAND = Command("prune", "layerprobe.cli.prune:prune", "layerprobe.commands.prune.run:run_prune",
                        settings=PruneConfig, kind=PRUNE_KIND, summary=PRUNE_SUMMARY, folder=prune_folder,
                        tables={"prune.csv": PRUNE + PAIRED + KINDS, "samples.csv.gz": SAMPLES})
CURVE_COMMAND = Command("curve", None, "layerprobe.commands.prune.curve:run_curve", settings=CurveSettings,
                        kind=CURVE_KIND, summary=CURVE_SUMMARY, folder=curve_folder,
                        tables={"curve.csv": CURVE + CURVE_PAIRED + CURVE_HEALED, "scores.csv": SCORES,
                                "samples.csv.gz": SAMPLES})
MERGE_COMMAND = Command("merge", "layerprobe.cli.merge:merge", "layerprobe.commands.prune.merge:merge_shards")
