"""summary.json, described once: every key each command writes, its type and meaning, with a schema_version.

write_run checks a summary against its command's record before anything is written (an undeclared key, a
missing required key or a value of the wrong type is a bug, never a file), readers can rely on the declared keys,
and docs/outputs.md is rendered from here (`python -m layerprobe.runs.schema > docs/outputs.md`, checked by a test).
A new summary key is one Key line in its command's record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerprobe.errors import RunError

SCHEMA_VERSION = 1  # bumped when a key changes meaning or goes; new keys keep the version


@dataclass(frozen=True)
class Key:
    name: str
    types: tuple[type, ...]  # what the value may be (None is allowed where `optional`)
    meaning: str
    required: bool = True  # False: written only in some runs (a GPU, an lm-eval task, a shard)
    optional: bool = False  # the value may be null


S, I, F, B, L, D = (str,), (int,), (int, float), (bool,), (list,), (dict,)

MODEL = (  # what the loaded model was: commands/probe.Probe.facts
    Key("model", S, "MODEL as given (hub id, folder, .gguf file, embedded name)"),
    Key("model_source", S, "embedded, local, hub or gguf"),
    Key("model_path", S, "the local folder the weights were read from", optional=True),
    Key("revision", S, "hub revision", optional=True),
    Key("weights", S, "fingerprint of the weights: a GGUF's sha256, or sha256 over each weight file's name, size, "
        "first and last MiB", optional=True),
    Key("gguf", D, "a GGUF source: file, sha256, architecture, quantization, dequantized_to", optional=True),
    Key("quantization", D, "quantized weights: method, bits, on_load", optional=True),
    Key("architecture", S, "the transformers class measured"),
    Key("layers_path", S, "dotted path of the block list measured"),
    Key("stack", S, "encoder, decoder, language or vision in a model with several stacks", optional=True),
    Key("num_layers", I, "blocks in the stack"),
    Key("layer_types", L, "the kind of each block (attention, mamba, sliding_attention, ...)", optional=True),
    Key("placement", S, "where the blocks normalize, read from one forward: pre, post, peri (sandwich), mix or "
        "unknown", required=False),
    Key("placement_by_layer", L, "the placement of each block", required=False),
    Key("dtype", S, "the dtype the model ran in"),
    Key("device", S, "the device the model ran on"),
)
RUN = (
    Key("command", S, "the command that wrote the folder"),
    Key("schema_version", I, "version of this record"),
    Key("seconds", F, "working time, interrupted parts included"),
    Key("warnings", L, "what the run warned about, one sentence each"),
)
CORPUS = (
    Key("dataset", S, "the probe corpus, as described to a reader"),
    Key("tokens", I, "token positions processed", optional=True),
    Key("seq_len", I, "packed sequence length in use"),
)
CORPUS_SOME = tuple(Key(k.name, k.types, f"ppl/kl/drift (dataset: squad too): {k.meaning}", required=False,
                        optional=k.optional) for k in CORPUS)
SWEEP_FACTS = (  # what each kind of prune task adds (commands/prune/sweeps.py, facts)
    Key("questions", I, "squad: questions scored", required=False),
    Key("windows", I, "squad: context windows scored", required=False),
    Key("limit", F, "lm-eval/squad: --limit", required=False, optional=True),
    Key("max_length", I, "squad: window length", required=False),
    Key("doc_stride", I, "squad: window stride", required=False),
    Key("num_fewshot", I, "lm-eval: few-shot examples (null: the task's default)", required=False, optional=True),
    Key("seed", I, "lm-eval: seed", required=False),
    Key("fewshot_seed", I, "lm-eval: few-shot sampling seed", required=False),
    Key("shared_prefix", D, "lm-eval: the shared-prefix batch (batch_size, longest_tokens, gib_per_sequence, "
        "budget_gib), null when each variant ran on its own", required=False, optional=True),
    Key("prefix_cache", D, "lm-eval: which path scored the requests (path: 'prefix cache', 'shared layers' or 'per "
        "variant', and the reason when not the prefix cache), the groups of rows sharing a few-shot prefix (groups, "
        "rows, prefix_tokens, over_memory: groups scored whole to fit --max-memory), and the block-tokens computed "
        "(block_tokens) next to what per-variant lm-eval computes for the same rows (naive_block_tokens); counts "
        "are this process's", required=False, optional=True),
    Key("mmlu_data", S, "--mmlu-data file", required=False, optional=True),
    Key("task_data", S, "lm-eval: the local copies of the datasets the tasks read (null: the hub)", required=False,
        optional=True),
    Key("splits", D, "lm-eval: per task, the split scored, its documents and how many of them were scored (--limit)",
        required=False),
    Key("shard", D, "--shard K/N: index, count, sweep_variants, variants", required=False),
    Key("groups", D, "lm-eval: each group and the leaf tasks under it (the documents of a group's metric in the "
        "records)", required=False, optional=True),
    Key("records", S, "the per-document records file (samples.csv.gz), null when the sweep wrote none",
        required=False, optional=True),
    Key("correction", S, "the multiple-testing correction of `significant` in the CSVs: holm (Holm's step-down over "
        "the variants of each metric, family-wise error 0.05)", required=False),
)
PRUNE_COMMON = (
    Key("task", S, "--task"),
    Key("part", S, "block, attn or mlp"),
    Key("sublayer", S, "how --part attn|mlp removed a sub-layer: branch (zeroed, norms kept) or module (skipped, its own norm too)", required=False),
    Key("metric", S, "the metric of the summary and the plot"),
    Key("higher_is_better", B, "the metric's direction"),
    Key("baseline", F, "the unpruned model's score", optional=True),
    Key("angular_run", S, "the angular run of the same model used for the correlations", optional=True),
)

SUMMARIES: dict[str, tuple[Key, ...]] = {
    "angular": RUN + MODEL + CORPUS + (
        Key("batch_size", I, "sequences per forward"),
        Key("positions", S, "all tokens, or the last of each sequence"),
        Key("tokens_requested", I, "--tokens"),
        Key("measured_positions", I, "positions in the distance sums"),
        Key("rank_tokens", I, "positions in the effective-rank sample"),
        Key("processes", I, "processes the pass ran on"),
        Key("peak_gpu_memory_gib", F, "peak GPU memory", optional=True),
        Key("logit_lens_tokens", I, "positions of the logit-lens column (0: none)"),
        Key("prune_first", L, "per block size n: the block (layer, layers, distance) with the smallest d(l, n)"),
    ),
    "prune": RUN + MODEL + CORPUS_SOME + PRUNE_COMMON + SWEEP_FACTS + (
        Key("block", I, "layers removed per variant"),
        Key("variants", I, "variants scored"),
        Key("least_important", L, "the variants whose removal costs least (at most 3)"),
        Key("most_important", L, "the variants whose removal costs most (at most 3)"),
        Key("spearman_angular_delta", F, "Spearman(d(l, block), dP) with the angular run", optional=True),
        Key("spearman_delta", D, "Spearman of each cheap signal of the angular run with dP"),
        Key("significant", L, "the variants whose dP on the summary's metric is significant (paired 95% interval, "
            "Holm's correction), costliest first; empty without records", required=False),
    ),
    "curve": RUN + MODEL + CORPUS_SOME + PRUNE_COMMON + SWEEP_FACTS + (
        Key("chance", F, "the task's chance accuracy, where known", optional=True),
        Key("keep", F, "--keep: the tolerance rule's share"),
        Key("keep_by", S, "--keep-by: what the tolerance judged, point (the score) or bound (the worse end of its "
            "paired 95% interval)", required=False),
        Key("max_removed", I, "largest k"),
        Key("strategies", L, "the strategies scored"),
        Key("greedy_metric", S, "what greedy minimized", optional=True),
        Key("greedy_ends", S, "greedy: keep (never the first or last remaining block, SLEB's rule) or allow",
            optional=True),
        Key("sets_scored", I, "distinct layer sets scored"),
        Key("heal_steps", I, "--heal-steps: LoRA steps healing each scored set (0: none)", required=False),
        Key("heal", S, "--heal: how each scored set was repaired (lstsq, cosine, lora, tail; null: not repaired)",
            required=False, optional=True),
        Key("heal_seconds", F, "--heal: wall time of all the repairs and their scoring in this run (a resumed run: "
            "the part after the resume)", required=False, optional=True),
        Key("healed_baseline", F, "--heal-steps: the unpruned model healed the same way, on the same text (the "
            "healed curves' fair reference: the healing also adapts a model with every layer to the corpus)",
            required=False, optional=True),
        Key("curve", D, "per strategy: max_k within tolerance, the layers removed and the score"),
    ),
    "heal": RUN + MODEL + CORPUS + (
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
        Key("transform", S, "--method lstsq|cosine: transform.safetensors, every map T (float64) by its run",
            required=False),
        Key("cosine_kept_lstsq", L, "--method cosine: the runs whose lstsq map was kept, no Adam step improving "
            "on it (a warning says so; empty: cosine moved every map; null for other methods)", required=False,
            optional=True),
        Key("repair_seconds", F, "wall time of the repair alone: training steps, or capture, fit and fold",
            required=False),
        Key("heldout_before", D, "ppl and kl of the shortened model on the held-out text before healing"),
        Key("heldout_after", D, "ppl and kl of the healed model on the held-out text"),
        Key("heldout_unpruned_ppl", F, "ppl of the unpruned model on the held-out text"),
        Key("adapter", S, "the adapter folder (PeftModel.from_pretrained on the shortened model; null for other "
            "methods)", optional=True),
        Key("merged", S, "the merged checkpoint (plain transformers; layerprobe-removal.json with the healing record)"),
        Key("verified_max_difference", F, "largest output difference of the merged folder reloaded with plain "
            "transformers"),
        Key("gain", D, "export's gain record (parameters, weights, prefill, decode, KV cache; original vs shortened)",
            optional=True),
        Key("from_curve", S, "--from-curve run", optional=True),
        Key("strategy", S, "--from-curve strategy", optional=True),
        Key("exported_from", S, "the exported folder given as MODEL", optional=True),
    ),
    "gradnorm": RUN + (
        Key("model", S, "the checkpoint, or the in-house size"),
        Key("arch", S, "in-house size", optional=True),
        Key("dataset", S, "the corpus of the batches"),
        Key("seq_len", I, "tokens per sequence"),
        Key("batch_size", I, "sequences per batch"),
        Key("seeds", I, "initializations per placement"),
        Key("batches", I, "batches per initialization"),
        Key("device", S, "the device"),
        Key("dtype", S, "the parameter dtype"),
        Key("steps", I, "training steps"),
        Key("record_steps", L, "the steps measured"),
        Key("peak_gpu_memory_gib", F, "peak GPU memory", optional=True),
        Key("lr", F, "--steps: peak learning rate", required=False),
        Key("warmup", I, "--steps: warmup steps", required=False),
        Key("clip", F, "--steps: gradient clipping", required=False),
        Key("placements", D, "per placement: late-over-early ratios of parameter and input gradient norms and of the "
            "output variance"),
        Key("final_loss", D, "--steps: the last step's mean loss per placement", required=False),
        Key("monitor_every", I, "--steps: training.csv measured every N steps", required=False),
        Key("training", D, "--steps: per placement (seeds averaged), the step from which the deep third's mean "
            "d(l, 1) stays below the shallow third's (crossover_step, null: not below at the end) and the two "
            "thirds' means at the last step", required=False),
    ),
    "monitor": RUN + (
        Key("model", S, "the trained model: its name_or_path, or its class"),
        Key("architecture", S, "the model's class"),
        Key("layers_path", S, "dotted path of the block list measured"),
        Key("num_layers", I, "blocks in the stack"),
        Key("dataset", S, "the probe corpus (or 'the given probe batches')"),
        Key("tokens", I, "probe positions measured at each step"),
        Key("seq_len", I, "probe sequence length"),
        Key("batch_size", I, "probe sequences per forward"),
        Key("every", I, "measured every N optimizer steps"),
        Key("steps", L, "the steps measured"),
        Key("processes", I, "processes of the training run (DDP ranks share the probe batches)"),
        Key("device", S, "the device the model trained on"),
        Key("dtype", S, "the model's parameter dtype"),
        Key("crossover_step", I, "the first measured step from which the deep third's mean d(l, 1) stays below the "
            "shallow third's (null: not below at the last step)", optional=True),
        Key("last", D, "at the last measured step: shallow and deep thirds' mean d(l, 1), and the late-over-early "
            "ratios of the gradient norm and of the variance"),
        Key("trainer", D, "the HF Trainer's max_grad_norm and gradient_accumulation_steps (LayerprobeCallback)",
            required=False),
        Key("lightning", D, "Lightning's gradient_clip_val and accumulate_grad_batches (LayerprobeLightningCallback)",
            required=False),
        Key("placement", S, "where the blocks normalize, read from one forward: pre, post, peri (sandwich), mix or "
            "unknown"),
        Key("placement_by_layer", L, "the placement of each block"),
    ),
    "toy": RUN + (
        Key("model", S, "toy"),
        Key("num_layers", I, "residual blocks"),
        Key("width", I, "hidden size"),
        Key("samples", I, "Gaussian inputs"),
        Key("alphas", L, "branch scales"),
        Key("seed", I, "seed"),
        Key("fits", D, "per placement and alpha: log-log slopes (with 95% intervals) over the deep half"),
        Key("expected_pre_ln", D, "the slopes a Pre-LN random walk predicts"),
    ),
}


def check_summary(command: str, summary: dict) -> dict:
    """The summary with its schema_version, after checking it against the command's record."""
    keys = {key.name: key for key in SUMMARIES[command]}
    summary = {**summary, "schema_version": SCHEMA_VERSION}
    unknown = sorted(set(summary) - set(keys))
    missing = sorted(k for k, key in keys.items() if key.required and k not in summary)
    wrong = sorted(k for k, v in summary.items() if k in keys and not _fits(v, keys[k]))
    if unknown or missing or wrong:
        raise RunError(f"The {command} summary breaks its schema (undeclared {unknown}, missing {missing}, wrong "
                       f"type {wrong}): please report this; runs/schema.py declares every key.")
    return summary


def _fits(value: Any, key: Key) -> bool:
    if value is None:
        return key.optional
    if isinstance(value, bool) and bool not in key.types:
        return False
    return isinstance(value, key.types)


def render_outputs() -> str:
    """docs/outputs.md: every command's summary.json keys, with type and meaning."""
    lines = ["# Output records", "",
             "Generated from `layerprobe/runs/schema.py` (`python -m layerprobe.runs.schema > docs/outputs.md`). Every "
             f"run folder holds `summary.json` (this record, `schema_version` {SCHEMA_VERSION}), `manifest.json` "
             "(versions, command line and working directory, the resolved settings, the files the run wrote: what a "
             "later --overwrite or --resume may replace) and its CSVs and figures. A key marked optional may be "
             "null; one marked 'some runs' is written only where it applies.", ""]
    for command, keys in SUMMARIES.items():
        lines += [f"## `{command}` summary.json", "", "| key | type | meaning |", "|---|---|---|"]
        for key in keys:
            kind = "/".join(t.__name__ for t in key.types) + (" or null" if key.optional else "")
            note = "" if key.required else " (some runs)"
            lines.append(f"| `{key.name}` | {kind} | {key.meaning}{note} |")
        lines.append("")
    from layerprobe.runs.columns import render_columns

    return "\n".join(lines) + "\n# CSV columns\n\n" + render_columns()


if __name__ == "__main__":
    print(render_outputs(), end="")
