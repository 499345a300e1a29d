"""torch.distributed for data-parallel runs launched by torchrun or accelerate launch (gloo on CPU, NCCL on GPUs).

Outside a launcher (no WORLD_SIZE in the environment) everything here is a no-op: one process, rank 0. Under a
launcher the process group is set up even for one process, so `torchrun --nproc_per_node 1` runs the collectives
(NCCL on a GPU) that N processes run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from layerprobe.errors import ConfigError


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    group: bool = False  # a torch.distributed process group is set up (launched by torchrun / accelerate)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, requested: str) -> str:
        """Each process on its own GPU: 'auto'/'cuda' become cuda:LOCAL_RANK when ranks share a node."""
        import torch

        if self.group and requested in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local_rank}"
        return requested

    def refuse_device_map(self, device_map: str | None) -> None:
        """A device map spreads one process over all GPUs: not with several processes."""
        if self.size > 1 and device_map:
            raise ConfigError("--device-map under torchrun would spread every process over all GPUs: run one "
                              "process with --device-map, or torchrun without it (one GPU per process).")

    def refuse_idle(self, units: int, what: str, fix: str = "") -> None:
        """More processes than units of work (batches, models, variants) leaves some idle: refuse before any work."""
        if self.size > units:
            raise ConfigError(f"{self.size} processes for {units} {what}: some would idle; "
                              f"{fix or f'run at most {units} processes'}.")

    def sum(self, tensor: Any) -> Any:
        """In-place all-reduce (sum) across ranks; returns the tensor."""
        if self.group:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's object, in rank order (on every rank)."""
        if not self.group:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


def current_world() -> World:
    """The process group of a torchrun / accelerate launch, initialized on first use."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return World()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("LAYERPROBE_BACKEND") != "gloo" else "gloo"
        if backend == "nccl":  # NCCL's object collectives use the current device: one GPU per rank
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")), group=True)
