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

import dataclasses
import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from layerprobe.commands import DEMO
from layerprobe.commands.angular import COMMAND as ANGULAR
from layerprobe.commands.gradnorm import COMMAND as GRADNORM
from layerprobe.commands.prune import CURVE_COMMAND, PRUNE_COMMAND
from layerprobe.config import (DEMO_OUT, DEMO_REFERENCE, AngularConfig, CurveSettings, DataOptions, GradnormConfig,
                               ModelOptions, PruneConfig)
from layerprobe.errors import ConfigError, RunError, check_path
from layerprobe.progress import Progress, silent
from layerprobe.report.page import report_runs
from layerprobe.runs.folder import (LOCK, abandons_on_error, check_owned, prepare_run_dir, release_run_dir, run_files,
                                    write_json)
from layerprobe.runs.manifest import build_manifest, start_time
from layerprobe.runs.read import load_run
from layerprobe.runs.resume import resume_state
from layerprobe.runs.kinds import resolve_ref
from layerprobe.runs.write import RunResult

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
    runs: list  # RunResult of each measurement, in the order run (a kept one by --resume: its folder, no tables)
    kept: list = field(default_factory=list)  # the sub-run folders a --resume found finished and kept


@dataclass
class Step:
    """One measurement of the demo: its sub-folder's command, its settings (out inside the demo folder) and the
    library call that runs it; `size_key` scales the reference run's seconds for the overall ETA."""

    name: str  # the progress label, "angular (MiniLM)"
    command: Any  # its run folder's record (commands.Command): angular, prune, curve or gradnorm
    config: Any
    runner: str | Callable[..., Any]  # its command's library run ('module:function', imported when the step runs)
    size_key: str


def _model(name: str) -> ModelOptions:
    return ModelOptions(name, dtype="float32", device="cpu")


def _data(tokens: int, batch_size: int = BATCH, seq_len: int = SEQ_LEN) -> DataOptions:
    return DataOptions("builtin", tokens=tokens, seq_len=seq_len, batch_size=batch_size)


def _minilm(folder: Path, size: dict) -> list[Step]:
    """The Post-LN half: the packaged all-MiniLM-L6-v2 (BERT), angular and a drift sweep."""
    angular = AngularConfig(model=_model("minilm"), data=_data(size["angular_tokens"]), out=str(folder / "angular"),
                            overwrite=True)  # no LM head, no lens (--lens-tokens would be refused)
    prune = PruneConfig(task="drift", model=_model("minilm"), data=_data(size["prune_tokens"]), angular=angular.out,
                        out=str(folder / "prune-drift"), overwrite=True)
    return [Step("angular (MiniLM)", ANGULAR, angular, ANGULAR.run, "angular_tokens"),
            Step("prune drift (MiniLM)", PRUNE_COMMAND, prune, PRUNE_COMMAND.run, "prune_tokens")]


def _smollm2(folder: Path, size: dict) -> list[Step]:
    """The Pre-LN half: SmolLM2-135M (LLaMA architecture, real GGUF weights), angular and ppl / kl sweeps, and the
    kl removal curves of the cheap strategies (greedy re-scores every layer per step: README, "Removal curves")."""
    model = _model("smollm2")
    angular = AngularConfig(model=model, data=_data(size["smollm2_angular_tokens"]),
                            out=str(folder / "smollm2-angular"), overwrite=True,
                            lens_tokens=size["lens_tokens"])  # SmolLM2's head 31 times per position
    steps = [Step("angular (SmolLM2)", ANGULAR, angular, ANGULAR.run, "smollm2_angular_tokens")]
    data = _data(size["smollm2_prune_tokens"], SMOLLM2_BATCH)
    for task in ("kl", "ppl"):
        steps.append(Step(f"prune {task} (SmolLM2)", PRUNE_COMMAND,
                          PruneConfig(task=task, model=model, data=data, angular=angular.out,
                                      out=str(folder / f"smollm2-prune-{task}"), overwrite=True),
                          PRUNE_COMMAND.run, "smollm2_prune_tokens"))
    curve = CurveSettings(strategies=("angular", "bi", "last"), max_removed=CURVE_MAX_REMOVED, keep=CURVE_KEEP)
    steps.append(Step("curve kl (SmolLM2)", CURVE_COMMAND,
                      PruneConfig(task="kl", model=model, data=data, curve=curve, angular=angular.out,
                                  out=str(folder / "smollm2-curve-kl"), overwrite=True),
                      CURVE_COMMAND.run, "smollm2_prune_tokens"))
    return steps


def _gemma3(folder: Path, size: dict) -> list[Step]:
    """The Peri-LN third: Gemma 3 270M (real GGUF weights, sliding-window and full attention), angular and kl."""
    model = _model("gemma3")
    angular = AngularConfig(model=model, data=_data(size["gemma3_angular_tokens"]), out=str(folder / "gemma3-angular"),
                            overwrite=True, lens_tokens=size["gemma3_lens_tokens"])
    prune = PruneConfig(task="kl", model=model, data=_data(size["gemma3_prune_tokens"], SMOLLM2_BATCH),
                        angular=angular.out, out=str(folder / "gemma3-prune-kl"), overwrite=True)
    return [Step("angular (Gemma 3)", ANGULAR, angular, ANGULAR.run, "gemma3_angular_tokens"),
            Step("prune kl (Gemma 3)", PRUNE_COMMAND, prune, PRUNE_COMMAND.run, "gemma3_prune_tokens")]


def _gradnorm(folder: Path, size: dict) -> list[Step]:
    """Gradient norms at initialization of the in-house placements (pre, post, mix, lns)."""
    config = GradnormConfig(arch=size["arch"], seeds=size["seeds"], batches=size["batches"], device="cpu",
                            dtype="float32", data=DataOptions("builtin", tokens=0, seq_len=GRAD_SEQ,
                                                              batch_size=GRAD_BATCH),
                            out=str(folder / "gradnorm"), overwrite=True)
    return [Step(f"gradnorm ({size['arch']})", GRADNORM, config, GRADNORM.run, "seeds")]


def demo_steps(folder: Path, quick: bool) -> list[Step]:
    """Every measurement of the demo, in the order run, each into its sub-folder of `folder`."""
    size = QUICK if quick else FULL
    return _minilm(folder, size) + _smollm2(folder, size) + _gemma3(folder, size) + _gradnorm(folder, size)


def _expected_seconds(step: Step, quick: bool) -> float:
    """The seconds the committed reference run took for this step (its summary.json), scaled by this run's size:
    the weights of the overall ETA. 60 where the reference is not at hand."""
    try:
        seconds = float(json.loads((Path(DEMO_REFERENCE) / Path(step.config.out).name / "summary.json")
                                   .read_text(encoding="utf-8"))["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        seconds = 60.0
    size = QUICK if quick else FULL
    ratio = size.get(step.size_key, 1) / FULL.get(step.size_key, 1) if step.size_key in FULL else 1.0
    return max(seconds * ratio, 1.0)


OVERALL = "demo, all steps (thousandths of the expected work)"  # the overall bar's label: what it counts


class _Overall:
    """Progress of the whole demo: each step weighted by its expected seconds, so the bar's ETA is the demo's."""

    def __init__(self, steps: list[Step], quick: bool, progress: Progress) -> None:
        self.weights = [_expected_seconds(step, quick) for step in steps]
        self.progress, self.before = progress, 0.0

    def stage(self, index: int, name: str) -> Progress:
        """The step's own progress, labelled with what it counts, and the overall bar moved along. Called only for
        a step that runs: a --resume's kept steps never report, so the bar's first value is the kept share and its
        rate (and ETA) counts only the work this process does."""
        total = sum(self.weights)
        self.before = sum(self.weights[:index])

        label = f"step {index + 1}/{len(self.weights)}, {name}: "  # which sub-run of how many, then its own unit

        def report(inner: str, done: int, whole: int) -> None:
            self.progress(label + inner, done, whole)
            share = self.weights[index] * min(done / whole, 1.0) if whole else 0.0
            self.progress(OVERALL, round(1000 * (self.before + share) / total), 1000)

        self.progress(OVERALL, round(1000 * self.before / total), 1000)
        return report

    def finish(self) -> None:
        self.progress(OVERALL, 1000, 1000)


def _run_step(step: Step, resume: bool, progress: Callable[[], Progress]) -> tuple[Any, bool]:
    """(its RunResult, whether it was kept): a fresh demo runs the step; a --resume keeps a finished sub-run after
    checking it (this step's command and settings, only layerprobe's files, tables that read back whole),
    continues an unfinished one, and runs a missing one. progress() makes the step's progress, for a step that
    runs (a kept one moves no bar)."""
    folder = Path(step.config.out)
    if not resume:
        return resolve_ref(step.runner)(step.config, progress()), False
    state = resume_state(folder, step.command, step.config)
    if state == "finished":
        load_run(folder)  # every table whole and readable, or a RunError naming what is wrong
        return RunResult(folder), True
    config = dataclasses.replace(step.config, overwrite=False, resume=state == "unfinished")
    return resolve_ref(step.runner)(config, progress()), False


@abandons_on_error
def run_demo(out: str = DEMO_OUT, quick: bool = False, overwrite: bool = False,
             progress: Progress = silent, resume: bool = False) -> DemoRun:
    """The argument on real weights (MiniLM, Post-LN; SmolLM2, Pre-LN; Gemma 3, Peri-LN: angular and task-free
    sweeps) and gradnorm of the in-house placements, then report.html/.md in `out` (or a timestamped sibling when `out`
    exists and overwrite is off). resume: continue the interrupted demo in `out`: finished sub-runs are checked and
    kept, an unfinished one continues from its last save, the rest run."""
    check_path(out, "--out")
    if resume and overwrite:
        raise ConfigError("demo: --resume continues the demo in --out and --overwrite replaces it: pass one of them.")
    started, clock = start_time(), time.perf_counter()
    if resume:
        _check_demo_resumable(Path(out))
    # an existing demo is kept (a timestamped sibling instead); --overwrite replaces only an earlier demo's files
    folder = prepare_run_dir(out, overwrite, resume, command=DEMO)
    steps = demo_steps(folder, quick)
    overall = _Overall(steps, quick, progress)
    runs, kept = [], []
    for index, step in enumerate(steps):
        run, was_kept = _run_step(step, resume, functools.partial(overall.stage, index, step.name))
        runs.append(run)
        if was_kept:
            kept.append(run.folder)
    overall.finish()
    report = report_runs([str(run.folder) for run in runs], str(folder))
    # no summary.json (not a run that report/compare read): the record of what the demo wrote, for a later --overwrite
    write_json(folder / "manifest.json", build_manifest("demo", {"quick": quick}, started, time.perf_counter() - clock,
                                                        files=sorted({*run_files(folder), "manifest.json"})))
    release_run_dir(folder)
    return DemoRun(folder, report.html, runs, kept)


def _check_demo_resumable(folder: Path) -> None:
    """--resume: `folder` holds an unfinished demo (its lock names the demo), not a finished one, nor another
    command's folder; refused before anything loads."""
    if not folder.is_dir():
        return  # prepare_run_dir names the missing folder
    check_owned(folder, DEMO, "--resume")
    if (folder / "manifest.json").is_file() and not (folder / LOCK).is_file():
        raise RunError(f"--resume: '{folder}' holds a finished demo: nothing to resume. Run `layerprobe demo` without "
                       "--resume (a new folder), or with --overwrite to replace it.")
