"""Settings of each command as dataclasses (CLI options map onto them one to one), and the project defaults from
`[tool.layerprobe]` in pyproject.toml or a layerprobe.toml: CLI flags win, then the project, then the dataclass
defaults (the one place a default is written)."""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import ConfigError



@dataclass
class TrainSettings:
    """AdamW with linear warmup then cosine decay to 10% of the peak, gradient clipping at `clip`."""

    steps: int = 0  # optimizer updates; 0 = measure at initialization only
    lr: float = 1e-3  # peak learning rate
    warmup: int | None = None  # linear warmup steps (None: 10% of steps)
    clip: float = 1.0  # max global gradient norm (0 = no clipping)
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)

    def __post_init__(self) -> None:
        if self.warmup is None:
            self.warmup = self.steps // 10


SQUAD_DATASET = "rajpurkar/squad"  # SQuAD v1.1 on the hub: prune --task squad's default data


@dataclass
class ModelOptions:
    """How to load the checkpoint."""

    model: str = "minilm"  # hub id, local folder, .gguf file, or 'minilm' / 'smollm2' (embedded models)
    dtype: str = "auto"  # auto = float32 on CPU, bfloat16 on GPU
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    revision: str | None = None  # hub branch, tag or commit
    trust_remote_code: bool = False  # run the checkpoint's own Python code (only if you trust it)
    layers_path: str | None = None  # dotted path of the block ModuleList, overriding discovery
    device_map: str | None = None  # accelerate placement over GPUs: auto, balanced, sequential, or JSON module -> device
    offload: str = "none"  # with device_map: none (GPUs only), cpu (spill to RAM), disk:DIR (and to DIR)
    gguf_file: str | None = None  # the .gguf file inside a folder or hub repo MODEL
    cache: bool = True  # keep a GGUF's dequantized weights in the user's cache (off: convert on every load)
    stack: str | None = None  # which block stack: encoder, decoder (encoder-decoders), language, vision (VLMs)
    quantize: str | None = None  # load quantized on the fly with bitsandbytes: 4bit or 8bit (CUDA only)


@dataclass
class DataOptions:
    """Which tokens to probe with."""

    dataset: str = "c4"  # c4, builtin, hub name[:config][:split], or a .txt/.jsonl/.parquet/save_to_disk path
    text_field: str = "text"  # column holding the text
    tokens: int = 262144  # exact number of token positions to process
    seq_len: int = 1024  # packed sequence length, capped at the model's maximum
    batch_size: int = 8  # sequences per forward pass
    seq_len_given: bool = field(default=True, compare=False)  # False: seq_len is the default, capped without a word


@dataclass
class AngularConfig:
    """`layerprobe angular`."""

    model: ModelOptions = field(default_factory=ModelOptions)
    data: DataOptions = field(default_factory=DataOptions)
    positions: str = "all"  # all tokens, or the last token of each sequence (Gromov et al.)
    out: str | None = None  # run folder; default reports/<model>/angular
    overwrite: bool = False  # replace an existing run folder instead of making a timestamped one
    resume: bool = False  # continue an interrupted pass in --out from its last saved sums
    save_every: float = 60.0  # seconds between saves of the running sums (the work a kill can lose)
    lens_tokens: int = 512  # causal LMs: positions for the logit-lens column of layers.csv (0: none)
    formats: tuple[str, ...] = ("png",)  # plot file formats
    top: int = 8  # block sizes shown in the terminal table of most prunable blocks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CURVE_STRATEGIES = ("angular", "bi", "greedy", "last")


@dataclass
class CurveSettings:
    """`prune --curve`: for k = 1..max_removed, the k layers each strategy removes, scored on the task."""

    strategies: tuple[str, ...] = CURVE_STRATEGIES
    max_removed: int | None = None  # largest k (None: max_fraction of the layers)
    max_fraction: float = 0.5  # largest fraction of the layers removed, when max_removed is not given
    greedy_metric: str = "kl"  # task-free metric the greedy strategy minimizes on the probe corpus (kl or ppl)
    keep: float = 0.95  # "within tolerance": score >= keep x baseline (higher-is-better), <= baseline / keep else


@dataclass
class PruneConfig:
    """`layerprobe prune`."""

    task: str = "ppl"  # lm-eval task/group, squad, or a task-free metric: ppl, kl, drift
    model: ModelOptions = field(default_factory=ModelOptions)
    data: DataOptions = field(default_factory=lambda: DataOptions(tokens=65536))  # probe corpus of ppl/kl/drift
    include_path: str | None = None  # folder of local lm-eval task YAML files
    mmlu_data: str | None = None  # --task mmlu*: a local MMLU JSON-lines file scored by lm-eval's own MMLU tasks
    num_fewshot: int | None = None  # lm-eval few-shot examples (task default when None)
    limit: float | None = None  # lm-eval: first N documents per task (fraction when < 1)
    layers: str | None = None  # restrict variants to these start layers, e.g. "0,3,8-11"
    block: int = 1  # remove this many consecutive layers per variant
    part: str = "block"  # what is removed of each chosen layer: the whole block, or only its attn or mlp sub-layer
    curve: CurveSettings | None = None  # --curve: removal curves by strategy instead of a one-layer-at-a-time sweep
    metric: str | None = None  # metric for the summary and plot (default: the task's first)
    shard: str | None = None  # "K/N": evaluate only the K-th of N disjoint slices of the variants (join with merge)
    shared_prefix: bool = True  # restart each variant from the stored block input (task-free and lm-eval)
    max_memory: int | None = None  # lm-eval shared prefix: bytes for a batch's stored activations (None: auto)
    angular: str | None = None  # angular run folder of the same model, for the Spearman correlation
    out: str | None = None  # run folder; default reports/<model>/prune-<task>
    resume: bool = False  # continue an interrupted run in --out
    overwrite: bool = False  # replace an existing run folder
    formats: tuple[str, ...] = ("png",)  # plot file formats

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ExportConfig:
    """`layerprobe export`."""

    model: ModelOptions = field(default_factory=ModelOptions)  # model.model None: the curve run's model
    remove: str | None = None  # 0-based block ids, ranges inclusive: "20-27", "3,7,9-11"
    part: str = "block"  # block, or attn / mlp: their output projections zeroed (the model keeps its size)
    from_curve: str | None = None  # a `prune --curve` run folder: export one strategy's choice
    strategy: str = "angular"  # --from-curve: which strategy's layers
    k: int | None = None  # --from-curve: how many layers (default: the strategy's largest k within tolerance)
    out: str = "exported"  # the checkpoint folder
    overwrite: bool = False
    verify: bool = True  # reload the export with plain transformers and compare outputs before finishing
    tolerance: float | None = None  # largest output difference the verify accepts (None: 1e-4 fp32, 2e-2 else)
    timing_batch: int = 1  # the batch the time per token is measured on (random ids, seed 0)
    timing_seq_len: int = 128
    timing_repeats: int = 5  # forwards per model, median taken

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GradnormConfig:
    """`layerprobe gradnorm`."""

    model: ModelOptions | None = None  # a checkpoint instead of the in-house family
    arch: str = "llama-71m"  # in-house size (Mix-LN Table 7) when no model is given; about a minute on 2 CPU cores
    norms: tuple[str, ...] = ("pre", "post", "mix", "lns")  # placements to compare
    alpha: float = 0.25  # Mix-LN: fraction of Post-LN layers
    norm_type: str = "rmsnorm"  # rmsnorm or layernorm
    tokenizer: str | None = None  # tokenizer for the in-house models (default: the embedded MiniLM's)
    seeds: int = 2  # initializations per placement (the paper-scale run: --arch llama-130m --seeds 3 --batch-size 8)
    batches: int = 2  # batches per initialization
    reinit: bool = False  # with a model: re-initialize it from its config
    device: str = "auto"  # where the in-house models are built
    dtype: str = "auto"  # parameter dtype: auto = float32 on CPU, bfloat16 on GPU
    train: TrainSettings = field(default_factory=TrainSettings)  # --steps N: AdamW updates after init
    record_steps: str | None = None  # steps to measure at, e.g. "0,100,500" (default: 0, quarters, end)
    data: DataOptions = field(default_factory=lambda: DataOptions(seq_len=256, batch_size=4, tokens=0))
    out: str | None = None  # run folder; default reports/<arch or model>/gradnorm
    overwrite: bool = False
    resume: bool = False  # continue an interrupted run in --out: finished (placement, seed) jobs are kept
    formats: tuple[str, ...] = ("png",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ToyConfig:
    """`layerprobe toy`."""

    norms: tuple[str, ...] = ("pre", "post", "mix", "lns")  # placements to compare
    depth: int = 100  # residual blocks
    width: int = 256  # hidden size (FC1 and FC2 are width x width)
    alphas: tuple[float, ...] = (1.0,)  # scale of FC2: the update's size against the input
    samples: int = 4096  # Gaussian inputs
    seed: int = 0
    mix_alpha: float = 0.25  # Mix-LN: fraction of Post-LN blocks
    out: str | None = None  # run folder; default reports/toy
    overwrite: bool = False
    formats: tuple[str, ...] = ("png",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- project defaults ---------------------------------------------------------------------------------------

KEYS = {
    "model": str, "dataset": str, "text_field": str, "tokens": int, "seq_len": int, "batch_size": int,
    "task": str, "tasks": list, "out": str, "include_path": str, "num_fewshot": int, "limit": (int, float),
    "block": int, "layers": str, "dtype": str, "device": str, "tolerance": dict,
}


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"'{path}' is not valid TOML ({exc}): fix the file.") from None


def find_project_config(start: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The nearest layerprobe.toml or pyproject.toml [tool.layerprobe], searching upward from start."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        own = candidate / "layerprobe.toml"
        if own.is_file():
            data = _read(own)
            return _check(data.get("tool", {}).get("layerprobe", data), own), own
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            section = _read(pyproject).get("tool", {}).get("layerprobe")
            return (_check(section, pyproject), pyproject) if section else ({}, None)
    return {}, None


def _check(data: dict, path: Path) -> dict:
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


# Environment variables that set a project default for every command (after CLI flags, before [tool.layerprobe])
ENVIRONMENT = {"dataset": "LAYERPROBE_DATASET"}


def pick(cli_value: Any, project: dict, key: str, default: Any) -> Any:
    """CLI value if given, else the environment's (ENVIRONMENT), else the project config's, else the default."""
    import os

    if cli_value is not None:
        return cli_value
    if key in ENVIRONMENT and os.environ.get(ENVIRONMENT[key]):
        return os.environ[ENVIRONMENT[key]]
    return project.get(key, default)
