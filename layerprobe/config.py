"""Settings of each command as dataclasses; CLI options map onto them one to one."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from layerprobe.training import TrainSettings


@dataclass
class ModelOptions:
    """How to load the checkpoint."""

    model: str = "minilm"  # hub id, local folder, or 'minilm' (the embedded all-MiniLM-L6-v2)
    dtype: str = "auto"  # auto = float32 on CPU, bfloat16 on GPU
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    revision: str | None = None  # hub branch, tag or commit
    trust_remote_code: bool = False  # run the checkpoint's own Python code (only if you trust it)
    layers_path: str | None = None  # dotted path of the block ModuleList, overriding discovery
    device_map: str | None = None  # accelerate placement over GPUs: auto, balanced, sequential, or JSON module -> device
    offload: str = "none"  # with device_map: none (GPUs only), cpu (spill to RAM), disk:DIR (and to DIR)


@dataclass
class DataOptions:
    """Which tokens to probe with."""

    dataset: str = "c4"  # c4, builtin, hub name[:config][:split], or a .txt/.jsonl/.parquet/save_to_disk path
    text_field: str = "text"  # column holding the text
    tokens: int = 262144  # exact number of token positions to process
    seq_len: int = 1024  # packed sequence length, capped at the model's maximum
    batch_size: int = 8  # sequences per forward pass


@dataclass
class AngularConfig:
    """`layerprobe angular`."""

    model: ModelOptions = field(default_factory=ModelOptions)
    data: DataOptions = field(default_factory=DataOptions)
    positions: str = "all"  # all tokens, or the last token of each sequence (Gromov et al.)
    out: str | None = None  # run folder; default reports/<model>/angular
    overwrite: bool = False  # replace an existing run folder instead of making a timestamped one
    formats: tuple[str, ...] = ("png",)  # plot file formats
    top: int = 5  # rows in the terminal table of most prunable blocks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PruneConfig:
    """`layerprobe prune`."""

    task: str = "ppl"  # lm-eval task/group, squad, or a task-free metric: ppl, kl, drift
    model: ModelOptions = field(default_factory=ModelOptions)
    data: DataOptions = field(default_factory=lambda: DataOptions(tokens=65536))  # probe corpus of ppl/kl/drift
    include_path: str | None = None  # folder of local lm-eval task YAML files
    num_fewshot: int | None = None  # lm-eval few-shot examples (task default when None)
    limit: float | None = None  # lm-eval: first N documents per task (fraction when < 1)
    layers: str | None = None  # restrict variants to these start layers, e.g. "0,3,8-11"
    block: int = 1  # remove this many consecutive layers per variant
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
class GradnormConfig:
    """`layerprobe gradnorm`."""

    model: ModelOptions | None = None  # a checkpoint instead of the in-house family
    arch: str = "llama-130m"  # in-house size (Mix-LN Table 7) when no model is given
    norms: tuple[str, ...] = ("pre", "post", "mix", "lns")  # placements to compare
    alpha: float = 0.25  # Mix-LN: fraction of Post-LN layers
    norm_type: str = "rmsnorm"  # rmsnorm or layernorm
    tokenizer: str | None = None  # tokenizer for the in-house models (default: the embedded MiniLM's)
    seeds: int = 3  # initializations per placement
    batches: int = 2  # batches per initialization
    reinit: bool = False  # with a model: re-initialize it from its config
    device: str = "auto"  # where the in-house models are built
    dtype: str = "auto"  # parameter dtype: auto = float32 on CPU, bfloat16 on GPU
    train: TrainSettings = field(default_factory=TrainSettings)  # --steps N: AdamW updates after init
    record_steps: str | None = None  # steps to measure at, e.g. "0,100,500" (default: 0, quarters, end)
    data: DataOptions = field(default_factory=lambda: DataOptions(seq_len=256, batch_size=8, tokens=0))
    out: str | None = None  # run folder; default reports/<arch or model>/gradnorm
    overwrite: bool = False
    resume: bool = False  # continue an interrupted run in --out: finished (placement, seed) jobs are kept
    formats: tuple[str, ...] = ("png",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
