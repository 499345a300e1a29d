"""run_demo(out): the measurements on embedded defaults, offline, and the report that reads them.

- angular on the embedded MiniLM (BERT, Post-LN, real weights) over Python's own docs, and a task-free pruning
  sweep on it (drift: 1 - cos of the final hidden state), with the angular correlation;
- the same on the embedded SmolLM2-135M (LLaMA, Pre-LN, real GGUF weights), with ppl and kl sweeps and the kl
  removal curves of the angular, Block Influence and last-n strategies;
- angular and a kl sweep on the embedded Gemma 3 270M (Peri-LN: a norm before and after each sub-layer, real GGUF
  weights), so the report sets the three placements side by side by relative depth;
- gradnorm at initialization on in-house llama-71m models, one per placement (pre, post, mix, lns).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from layerprobe.commands.angular.run import run_angular
from layerprobe.commands.gradnorm.run import run_gradnorm
from layerprobe.commands.prune.curve import run_curve
from layerprobe.commands.prune.run import run_prune
from layerprobe.config import (DEMO_OUT, AngularConfig, CurveSettings, DataOptions, GradnormConfig, ModelOptions,
                               PruneConfig)
from layerprobe.errors import check_path
from layerprobe.progress import Progress, silent
from layerprobe.report.page import report_runs
from layerprobe.runs.folder import abandons_on_error, prepare_run_dir, release_run_dir, run_files, write_json
from layerprobe.runs.manifest import build_manifest, start_time

# Token counts of the reference demo and its quick twin. The quick twin keeps the layer counts, sequence shapes
# and first seed/batch, so `compare` can judge it against the committed reference with loose tolerances.
# SmolLM2 is 30 layers with a 49,152-word head on 2 CPU cores: its sweeps score each of 30 variants' logits,
# so they get fewer tokens (README: "What the demo shows" gives the noise at these counts).
# Gemma 3's head is 262,144 words (3.4x the FLOPs of its 18 blocks per token): its kl sweep scores 256 positions.
FULL = {"angular_tokens": 65536, "prune_tokens": 16384, "smollm2_angular_tokens": 8192, "smollm2_prune_tokens": 512,
        "lens_tokens": 256, "gemma3_angular_tokens": 2048, "gemma3_prune_tokens": 256, "gemma3_lens_tokens": 64,
        "arch": "llama-71m", "seeds": 2, "batches": 2}
QUICK = {"angular_tokens": 8192, "prune_tokens": 2048, "smollm2_angular_tokens": 1024, "smollm2_prune_tokens": 512,
         "lens_tokens": 64, "gemma3_angular_tokens": 1024, "gemma3_prune_tokens": 256, "gemma3_lens_tokens": 16,
         "arch": "llama-71m", "seeds": 1, "batches": 1}
SEQ_LEN, BATCH, GRAD_SEQ, GRAD_BATCH = 256, 8, 128, 4
CURVE_MAX_REMOVED = 8  # of SmolLM2's 30 layers
CURVE_KEEP = 0.8  # kl <= ln(1/0.8) = 0.22 nats: a 135M model loses more than 0.05 nats to any one layer
SMOLLM2_BATCH = 2  # sequences of 256 tokens per forward: the sweeps' stored block inputs stay small


@dataclass
class DemoRun:
    folder: Path
    report: Path
    runs: list  # RunResult of each measurement, in the order run


def _minilm(folder: Path, size: dict, stage) -> list:
    """The Post-LN half: the packaged all-MiniLM-L6-v2 (BERT), angular and a drift sweep."""
    model = ModelOptions("minilm", dtype="float32", device="cpu")
    angular = run_angular(AngularConfig(model=model, data=DataOptions("builtin", tokens=size["angular_tokens"],
                                                                       seq_len=SEQ_LEN, batch_size=BATCH),
                                        out=str(folder / "angular"), overwrite=True,
                                        lens_tokens=512),  # no LM head, no lens: the value the reference records
                          stage("angular (MiniLM)"))
    prune = run_prune(PruneConfig(task="drift", model=model,
                                  data=DataOptions("builtin", tokens=size["prune_tokens"], seq_len=SEQ_LEN,
                                                   batch_size=BATCH),
                                  angular=str(angular.folder), out=str(folder / "prune-drift"), overwrite=True),
                      stage("prune drift (MiniLM)"))
    return [angular, prune]


def _smollm2(folder: Path, size: dict, stage) -> list:
    """The Pre-LN half: SmolLM2-135M (LLaMA architecture, real GGUF weights), angular and ppl / kl sweeps."""
    model = ModelOptions("smollm2", dtype="float32", device="cpu")
    angular = run_angular(AngularConfig(model=model, data=DataOptions("builtin", tokens=size["smollm2_angular_tokens"],
                                                                       seq_len=SEQ_LEN, batch_size=BATCH),
                                        out=str(folder / "smollm2-angular"), overwrite=True,
                                        lens_tokens=size["lens_tokens"]),  # SmolLM2's head 31 times per position
                          stage("angular (SmolLM2)"))
    runs = [angular]
    for task in ("kl", "ppl"):
        data = DataOptions("builtin", tokens=size["smollm2_prune_tokens"], seq_len=SEQ_LEN, batch_size=SMOLLM2_BATCH)
        runs.append(run_prune(PruneConfig(task=task, model=model, data=data, angular=str(angular.folder),
                                          out=str(folder / f"smollm2-prune-{task}"), overwrite=True),
                              stage(f"prune {task} (SmolLM2)")))
    # removal curves of the cheap strategies (greedy re-scores every layer per step: README, "Removal curves")
    data = DataOptions("builtin", tokens=size["smollm2_prune_tokens"], seq_len=SEQ_LEN, batch_size=SMOLLM2_BATCH)
    curve = CurveSettings(strategies=("angular", "bi", "last"), max_removed=CURVE_MAX_REMOVED, keep=CURVE_KEEP)
    runs.append(run_curve(PruneConfig(task="kl", model=model, data=data, curve=curve, angular=str(angular.folder),
                                      out=str(folder / "smollm2-curve-kl"), overwrite=True), stage("curve kl (SmolLM2)")))
    return runs


def _gemma3(folder: Path, size: dict, stage) -> list:
    """The Peri-LN third: Gemma 3 270M (real GGUF weights, sliding-window and full attention), angular and kl."""
    model = ModelOptions("gemma3", dtype="float32", device="cpu")
    angular = run_angular(AngularConfig(model=model, data=DataOptions("builtin", tokens=size["gemma3_angular_tokens"],
                                                                       seq_len=SEQ_LEN, batch_size=BATCH),
                                        out=str(folder / "gemma3-angular"), overwrite=True,
                                        lens_tokens=size["gemma3_lens_tokens"]), stage("angular (Gemma 3)"))
    data = DataOptions("builtin", tokens=size["gemma3_prune_tokens"], seq_len=SEQ_LEN, batch_size=SMOLLM2_BATCH)
    prune = run_prune(PruneConfig(task="kl", model=model, data=data, angular=str(angular.folder),
                                  out=str(folder / "gemma3-prune-kl"), overwrite=True), stage("prune kl (Gemma 3)"))
    return [angular, prune]


@abandons_on_error
def run_demo(out: str = DEMO_OUT, quick: bool = False, overwrite: bool = False,
             progress: Progress = silent) -> DemoRun:
    """The argument on real weights (MiniLM, Post-LN; SmolLM2, Pre-LN; Gemma 3, Peri-LN: angular and task-free
    sweeps) and gradnorm of the in-house placements, then report.html/.md in `out` (or a timestamped sibling when `out`
    exists and overwrite is off)."""
    check_path(out, "--out")
    size = QUICK if quick else FULL
    started, clock = start_time(), time.perf_counter()
    # an existing demo is kept (a timestamped sibling instead); --overwrite replaces only an earlier demo's files
    folder = prepare_run_dir(out, overwrite, command="demo")

    def stage(name: str) -> Progress:
        return lambda _, done, total: progress(name, done, total)

    runs = _minilm(folder, size, stage) + _smollm2(folder, size, stage) + _gemma3(folder, size, stage)
    runs.append(run_gradnorm(GradnormConfig(arch=size["arch"], seeds=size["seeds"], batches=size["batches"],
                                            device="cpu", dtype="float32",
                                            data=DataOptions("builtin", tokens=0, seq_len=GRAD_SEQ,
                                                             batch_size=GRAD_BATCH),
                                            out=str(folder / "gradnorm"), overwrite=True),
                             stage(f"gradnorm ({size['arch']})")))
    report = report_runs([str(run.folder) for run in runs], str(folder))
    # no summary.json (not a run that report/compare read): the record of what the demo wrote, for a later --overwrite
    write_json(folder / "manifest.json", build_manifest("demo", {"quick": quick}, started, time.perf_counter() - clock,
                                                        files=sorted({*run_files(folder), "manifest.json"})))
    release_run_dir(folder)
    return DemoRun(folder, report.html, runs)
