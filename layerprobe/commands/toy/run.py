"""run_toy(config): the residual-MLP depth model (forward statistics and gradients) for every placement.

A stack of `depth` residual blocks, each F(h) = alpha * FC2(ReLU(FC1(h))), placed around its normalization as
in the in-house family (same `residual_step`), fed i.i.d. Gaussian inputs. Per block output h_l: mean norm,
cosine with the next and with the input, effective rank, and the gradient norm of the block's parameters for a
fixed random linear read-out of h_L.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from layerprobe.commands.toy import COMMAND
from layerprobe.config import ToyConfig
from layerprobe.errors import ConfigError
from layerprobe.metrics.stats import effective_rank, power_law
from layerprobe.models.placement import check_placements, residual_step
from layerprobe.plots.toy import toy_figure
from layerprobe.progress import Progress, silent
from layerprobe.runs.folder import abandons_on_error, check_owned, prepare_run_dir
from layerprobe.runs.manifest import start_time
from layerprobe.runs.write import RunResult, write_run
from layerprobe.commands.toy import TOY
from layerprobe.runs.columns import names
from layerprobe.settings import takes

COLUMNS = names(TOY)  # declared in this command's record (commands/toy/__init__.py)
# Random-walk argument for Pre-LN (see the toy-model note): ||h_l|| ~ l^(1/2), 1 - cos(h_l, h_l+1) ~ l^(-1).
EXPECTED_PRE = {"hidden_norm": 0.5, "one_minus_cos_next": -1.0}


ToyRun = RunResult  # tables: toy (COLUMNS)


class ToyModel:
    """The blocks as plain tensors (weights created once per seed), run with torch autograd."""

    def __init__(self, placement: str, config: ToyConfig, alpha: float) -> None:
        import torch

        check_placements([placement])
        gen = torch.Generator().manual_seed(config.seed)
        w, depth = config.width, config.depth
        self.alpha, self.depth, self.norm = alpha, depth, placement
        # He init for FC1 (ReLU follows), 1/sqrt(width) for FC2: the update has the input's scale times alpha
        self.fc1 = [(torch.randn(w, w, generator=gen) * math.sqrt(2.0 / w)).requires_grad_() for _ in range(depth)]
        self.fc2 = [(torch.randn(w, w, generator=gen) * math.sqrt(1.0 / w)).requires_grad_() for _ in range(depth)]
        post_layers = math.floor(config.mix_alpha * depth)
        self.placements = [("post" if l < post_layers else "pre") if placement == "mix" else placement
                           for l in range(depth)]
        self.scales = [1.0 / math.sqrt(l + 1) if p == "lns" else 1.0 for l, p in enumerate(self.placements)]
        self.residual_alpha = (2.0 * depth) ** 0.25 if placement == "deepnorm" else 1.0

    def forward(self, x: Any) -> list[Any]:
        """[h_0, h_1, ..., h_depth]: the input and every block's output."""
        import torch.nn.functional as F

        def norm(h):
            return F.layer_norm(h, h.shape[-1:])

        states = [x]
        for l in range(self.depth):
            def f(h, l=l):
                return self.alpha * (F.relu(h @ self.fc1[l].T) @ self.fc2[l].T)

            states.append(residual_step(self.placements[l], states[-1], f, norm, norm, self.scales[l],
                                        self.residual_alpha))
        return states


def measure_toy(model: ToyModel, x: Any, readout: Any, on_layer: Any = None) -> list[dict]:
    """Statistics of h_1..h_depth and per-block gradient norms for loss = mean(h_depth @ readout); on_layer() after
    each layer's statistics (the effective rank's SVD is most of the time)."""
    import torch

    states = model.forward(x)
    for l, h in enumerate(states[1:], start=1):
        if not bool(torch.isfinite(h).all()):
            raise ConfigError(f"--branch-scale {model.alpha:g} overflows float32 in the {model.norm} toy model at "
                              f"layer {l} of {model.depth} (hidden states not finite): use a smaller --branch-scale.")
    loss = (states[-1] @ readout).mean()
    grads = torch.autograd.grad(loss, model.fc1 + model.fc2)
    depth = model.depth
    rows = []
    with torch.no_grad():
        h0 = states[0].double()
        for l in range(1, depth + 1):
            h = states[l].detach().double()
            nxt = states[l + 1].detach().double() if l < depth else None
            block = math.sqrt(float(grads[l - 1].double().pow(2).sum() + grads[depth + l - 1].double().pow(2).sum()))
            rows.append({
                "layer": l,
                "hidden_norm": float(h.norm(dim=-1).mean()),
                "cos_next": float(torch.nn.functional.cosine_similarity(h, nxt, dim=-1).mean()) if nxt is not None else math.nan,
                "cos_input": float(torch.nn.functional.cosine_similarity(h, h0, dim=-1).mean()),
                "effective_rank": effective_rank(h),
                "grad_norm": block,
            })
            if on_layer is not None:
                on_layer()
    return rows


@takes(ToyConfig, "layerprobe.toy")  # the CLI's checks, from the same declarations, before anything loads
@abandons_on_error
def run_toy(config: ToyConfig, progress: Progress = silent) -> ToyRun:
    """Every placement x alpha of the toy model: statistics of each block output, power-law fits, the plot."""
    import pandas as pd
    import torch

    started, clock = start_time(), time.perf_counter()
    if config.depth < 2 or config.width < 2 or config.samples < 2:
        raise ConfigError("--depth, --width and --samples must be at least 2.")
    if not config.alphas or any(not a > 0 or math.isinf(a) for a in config.alphas):
        raise ConfigError(f"--branch-scale must be positive numbers, got {', '.join(map(str, config.alphas)) or 'none'}.")
    if not 0.0 <= config.mix_alpha <= 1.0:
        raise ConfigError(f"--mix-alpha must be within [0, 1], got {config.mix_alpha}.")
    out = COMMAND.out(config, None)
    if config.overwrite:  # refused before the measuring, not after it (the folder is claimed once the table is done)
        check_owned(Path(out), COMMAND, "--overwrite")
    gen = torch.Generator().manual_seed(config.seed + 1)
    x = torch.randn(config.samples, config.width, generator=gen)  # i.i.d. Gaussian inputs
    readout = torch.randn(config.width, generator=gen) / math.sqrt(config.width)
    rows = []
    cases = [(n, a) for n in config.norms for a in config.alphas]
    total, done = len(cases) * config.depth, [0]  # progress in layers: placements x depth
    progress("layers", 0, total)
    models = [ToyModel(n, config, a) for n, a in cases]  # validates every placement before any work

    def layer_done() -> None:
        done[0] += 1
        progress("layers", done[0], total)

    for (norm, alpha), model in zip(cases, models):
        for row in measure_toy(model, x, readout, layer_done):
            rows.append({"norm": norm, "alpha": alpha, **row})
    table = pd.DataFrame(rows, columns=COLUMNS)
    seconds = time.perf_counter() - clock
    folder = prepare_run_dir(out, config.overwrite, command=COMMAND)
    return write_toy_outputs(folder, table, config, started, seconds)


def fits(table: Any) -> dict:
    """Per placement and alpha: log-log slopes over the deep half of norm, 1 - cos_next and the gradient norm."""
    out: dict = {}
    for (norm, alpha), part in table.groupby(["norm", "alpha"], sort=False):
        deep = part[part["layer"] >= part["layer"].max() / 2]
        out.setdefault(norm, {})[f"alpha={alpha:g}"] = {
            "hidden_norm": power_law(deep["layer"], deep["hidden_norm"]),
            "one_minus_cos_next": power_law(deep["layer"], 1.0 - deep["cos_next"]),
            "grad_norm": power_law(deep["layer"], deep["grad_norm"]),
        }
    return out


def write_toy_outputs(folder: Any, table: Any, config: ToyConfig, started: str, seconds: float) -> ToyRun:
    """toy.csv, the four-panel plot, power-law fits in summary.json, manifest."""
    fitted = fits(table)
    summary = {"model": "toy", "num_layers": config.depth, "width": config.width,
               "samples": config.samples, "alphas": list(config.alphas), "seed": config.seed,
               "fits": fitted, "expected_pre_ln": EXPECTED_PRE, "seconds": round(seconds, 3), "warnings": []}
    return write_run(folder, COMMAND, tables={"toy": table[COLUMNS]}, figures={"toy": toy_figure(table, fitted, config)},
                     summary=summary, config=config, started=started, seconds=seconds,
                     facts={"model": "toy", "device": "cpu", "dtype": "float32"}, formats=config.formats)
