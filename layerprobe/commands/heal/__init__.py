"""`layerprobe heal`: repair after removal (run.py: the command; outputs.py: the folder; the repairs themselves live
in layerprobe/repair/), and its record."""

from __future__ import annotations

from layerprobe.commands.record import Command, named
from layerprobe.config import HealConfig
from layerprobe.runs.columns import YES_NO, Column
from layerprobe.runs.keys import CORPUS, MODEL, RUN, D, F, I, Key, L, S
from layerprobe.runs.kinds import Kind

HEAL = (  # heal.csv: one row per training step, and step 0 (before healing)
    Column("step", "AdamW updates done (0: before healing; --method lstsq|cosine: 1, the maps folded)", key=True,
           whole=True),
    Column("loss", "the step's training loss (lm: next-token cross-entropy; distill: KL(unpruned || shortened)) "
           "on its batch, before its update; empty at step 0", "nats", gaps=True),
    Column("lr", "the learning rate of the step's update", gaps=True),
    Column("heldout_ppl", "perplexity of the healed model on the held-out text, every --eval-every steps (else empty)", gaps=True),
    Column("heldout_kl", "mean KL(unpruned || healed) of next-token distributions on the held-out text, every "
           "--eval-every steps (else empty)", "nats", gaps=True),
    Column("ppl_change_lo", "lower end of the paired 95% interval of heldout_ppl - step 0's over the held-out "
           "sequences (the paired bootstrap's expanded percentile interval, seed 0, 2,000 resamples); empty at "
           "step 0 and unscored steps",
           label="ppl change lo", optional=True),
    Column("ppl_change_hi", "its upper end", label="ppl change hi", optional=True),
    Column("kl_change_lo", "lower end of the paired 95% interval of heldout_kl - step 0's over the held-out "
           "sequences (the paired bootstrap's expanded percentile interval, seed 0, 2,000 resamples)", "nats",
           label="kl change lo", optional=True),
    Column("kl_change_hi", "its upper end", "nats", label="kl change hi", optional=True),
)
REPLACE = (  # replace.csv (heal --method lstsq|cosine): one row per removed run of blocks, fitted in order
    Column("run", "the removed run, first-last (0-based, inclusive)", key=True, number=False),
    Column("first", "its first block", whole=True),
    Column("last", "its last block", whole=True),
    Column("folded_into", "the projection the map T was folded into (the MLP output of block first-1)", number=False),
    Column("tokens", "calibration positions the map was fitted on", "positions", whole=True),
    Column("mse_removed", "mean over positions of ||x_in - x_out||^2: what plain removal leaves (T = I)"),
    Column("mse_fitted", "mean over positions of ||x_in - m + m T - x_out||^2 with the fitted T"),
    Column("cosine_removed", "mean of 1 - cos(x_in, x_out): plain removal"),
    Column("cosine_fitted", "mean of 1 - cos(x_in - m + m T, x_out) with the fitted T"),
    Column("cosine_lstsq", "--method cosine: the cosine objective of the lstsq start (empty for lstsq)", gaps=True),
    Column("cosine_kept_lstsq", "--method cosine: True where no Adam step improved on the lstsq start, so the "
           "lstsq map was kept (empty for lstsq)", number=False, optional=True, words=YES_NO),
    Column("seconds", "wall time of the capture, the fit and the fold", "s"),
)
SUMMARY = RUN + MODEL + CORPUS + (
    Key("batch_size", I, "sequences per training step"),
    Key("removed", S, "the removed blocks, 0-based, inclusive ranges"),
    Key("removed_layers", L, "the removed blocks"),
    Key("num_layers_healed", I, "blocks of the healed model"),
    Key("method", S, "lora (LoRA adapters), tail (the LM head and last blocks trained), lstsq or cosine (one "
        "linear map per removed run folded into the block before it, no training)", required=False),
    Key("objective", S, "lm (next-token loss) or distill (KL to the unpruned model); null for lstsq and cosine",
        optional=True),
    Key("steps", I, "training steps (cosine: Adam steps on the maps; lstsq: 0)"),
    Key("lr", F, "peak learning rate (cosine: Adam's; null for lstsq)", optional=True),
    Key("lora_rank", I, "LoRA rank (null for other methods)", optional=True),
    Key("lora_alpha", F, "LoRA alpha (null for other methods)", optional=True),
    Key("lora_targets", L, "the adapted projections, by name (null for other methods)", optional=True),
    Key("tail_blocks", I, "--method tail: the last kept blocks trained with the LM head", required=False,
        optional=True),
    Key("trainable_parameters", I, "the parameters fitted: adapters (lora), head and tail blocks (tail), the "
        "maps' entries (lstsq, cosine)"),
    Key("train_tokens", I, "token positions trained on (steps x batch x seq_len), or fitted on (lstsq, cosine)"),
    Key("train_sequences", I, "distinct training sequences after the held-out slice (cycled when fewer)"),
    Key("ridge", F, "--method lstsq|cosine: ridge towards the identity", required=False),
    Key("calibration", D, "--method lstsq|cosine: what the maps were fitted on: dataset, tokens, sequences, "
        "first_position and last_position (corpus positions, after the held-out text)", required=False),
    Key("transform", S, "--method lstsq|cosine: transform.safetensors, every map T (float64) by its run; the "
        "path relative to the run folder", required=False),
    Key("cosine_kept_lstsq", L, "--method cosine: the runs whose lstsq map was kept, no Adam step improving "
        "on it (a warning says so; empty: cosine moved every map; null for other methods)", required=False,
        optional=True),
    Key("repair_seconds", F, "wall time of the repair alone: training steps, or capture, fit and fold",
        required=False),
    Key("heldout_before", D, "ppl and kl of the shortened model on the held-out text before healing"),
    Key("heldout_after", D, "ppl and kl of the healed model on the held-out text"),
    Key("heldout_unpruned_ppl", F, "ppl of the unpruned model on the held-out text"),
    Key("heldout_change", D, "heldout_after - heldout_before with paired intervals over the held-out sequences: "
        "sequences, tested (false below 10 sequences: too few documents to test, p null), and per metric (ppl, "
        "kl) change, stderr, lo, hi, p (the paired bootstrap's expanded percentile interval, seed 0, 2,000 "
        "resamples; p the paired t test of the mean NLL, of kl)",
        required=False),
    Key("adapter", S, "the adapter folder (PeftModel.from_pretrained on the shortened model; null for other "
        "methods)", optional=True),
    Key("merged", S, "the merged checkpoint (plain transformers; layerprobe-removal.json with the healing record); "
        "null with --no-merged", optional=True),
    Key("merged_bytes", I, "the size of merged/ on disk (null with --no-merged)", required=False, optional=True),
    Key("verified_max_difference", F, "largest output difference of the merged folder reloaded with plain "
        "transformers (null with --no-merged: nothing was saved to reload)", optional=True),
    Key("gain", D, "export's gain record (parameters, weights, prefill, decode, KV cache; original vs shortened)",
        optional=True),
    Key("from_curve", S, "--from-curve run", optional=True),
    Key("strategy", S, "--from-curve strategy", optional=True),
    Key("exported_from", S, "the exported folder given as MODEL", optional=True),
)
READ = f"{__name__}.read:"  # read.py: its findings and per-layer table, imported on first use
KIND = Kind("heal", (("heal.csv", True), ("replace.csv", False)), "heal.png",
            "Healing after removal: LoRA, the tail, or linear replacement of the removed blocks",
            (("removed", "removed"), ("method", "method"), ("objective", "objective"), ("steps", "steps"),
             ("dataset", "dataset")),
            READ + "heal_findings", READ + "heal_table", config_class=HealConfig,
            reads=("removed", "heldout_before", "heldout_after"))
COMMAND = Command("heal", "layerprobe.cli.heal:heal", "layerprobe.commands.heal.run:run_heal", settings=HealConfig,
                  kind=KIND, summary=SUMMARY, tables={"heal.csv": HEAL, "replace.csv": REPLACE}, folder=named("heal"))
