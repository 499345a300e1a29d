"""Settings of each command as dataclasses; CLI options map onto them one to one."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ModelOptions:
    """How to load the checkpoint."""

    model: str = "minilm"  # hub id, local folder, or 'minilm' (the embedded all-MiniLM-L6-v2)
    dtype: str = "auto"  # auto = float32 on CPU, bfloat16 on GPU
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    revision: str | None = None  # hub branch, tag or commit
    trust_remote_code: bool = False  # run the checkpoint's own Python code (only if you trust it)
    layers_path: str | None = None  # dotted path of the block ModuleList, overriding discovery


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
