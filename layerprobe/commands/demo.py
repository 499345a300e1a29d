"""run_demo(out): the three measurements on embedded defaults, offline, and the report that reads them.

- angular on the embedded MiniLM (BERT, Post-LN, real weights) over Python's own docs;
- a task-free pruning sweep on it (drift: 1 - cos of the final hidden state), with the angular correlation;
- gradnorm at initialization on in-house llama-71m models, one per placement (pre, post, mix, lns).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from layerprobe.commands.angular import run_angular
from layerprobe.commands.gradnorm.run import run_gradnorm
from layerprobe.commands.prune.run import run_prune
from layerprobe.config import AngularConfig, DataOptions, GradnormConfig, ModelOptions, PruneConfig
from layerprobe.progress import Progress, silent
from layerprobe.report.page import report_runs
from layerprobe.runs.folder import prepare_run_dir

# (angular tokens, prune tokens, gradnorm arch, seeds, batches): the reference demo and its quick twin.
# The quick twin keeps the layer counts, sequence shapes and first seed/batch, so `compare` can judge it
# against the committed reference with loose tolerances.
FULL = {"angular_tokens": 65536, "prune_tokens": 16384, "arch": "llama-71m", "seeds": 2, "batches": 2}
QUICK = {"angular_tokens": 8192, "prune_tokens": 2048, "arch": "llama-71m", "seeds": 1, "batches": 1}
SEQ_LEN, BATCH, GRAD_SEQ, GRAD_BATCH = 256, 8, 128, 4


@dataclass
class DemoRun:
    folder: Path
    report: Path
    angular: object
    prune: object
    gradnorm: object


def run_demo(out: str = "reports/demo", quick: bool = False, overwrite: bool = False,
             progress: Progress = silent) -> DemoRun:
    """Run angular, prune (drift) and gradnorm on embedded defaults, then write report.html/.md in `out`
    (or a timestamped sibling when `out` exists and overwrite is off)."""
    size = QUICK if quick else FULL
    folder = prepare_run_dir(out, overwrite=overwrite)  # an existing demo (the committed reference) is kept
    overwrite = True  # the sub-runs live in the folder just chosen
    model = ModelOptions("minilm", "float32", "cpu")

    def stage(name: str) -> Progress:
        return lambda _, done, total: progress(name, done, total)

    angular = run_angular(AngularConfig(model=model, data=DataOptions("builtin", "text", size["angular_tokens"], SEQ_LEN, BATCH),
                                        out=str(folder / "angular"), overwrite=overwrite), stage("angular (MiniLM)"))
    prune = run_prune(PruneConfig(task="drift", model=model,
                                  data=DataOptions("builtin", "text", size["prune_tokens"], SEQ_LEN, BATCH),
                                  angular=str(angular.folder), out=str(folder / "prune-drift"), overwrite=overwrite),
                      stage("prune drift (MiniLM)"))
    gradnorm = run_gradnorm(GradnormConfig(arch=size["arch"], seeds=size["seeds"], batches=size["batches"],
                                           device="cpu", dtype="float32",
                                           data=DataOptions("builtin", "text", 0, GRAD_SEQ, GRAD_BATCH),
                                           out=str(folder / "gradnorm"), overwrite=overwrite),
                            stage(f"gradnorm ({size['arch']})"))
    report = report_runs([str(angular.folder), str(prune.folder), str(gradnorm.folder)], str(folder))
    return DemoRun(folder, report.html, angular, prune, gradnorm)
