"""The lm-eval and transformers internals layerprobe relies on, in one place: where each lives, what it is used for,
and what of it layerprobe calls, overrides or reads, checked against the releases in CHECKED.

Internals are names outside a library's top-level API (a class in a submodule, a private method or attribute, a
module's folder layout). A new release may move or change them without notice; when one does, the import below
fails naming the internal, and `python -m layerprobe.internals` (tests/test_internals.py) says what moved.
Names are imported on first use (`from layerprobe.internals import HFLM`), so importing this module loads neither
lm-eval nor transformers: `layerprobe --help`, `report` and `merge` stay light.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The releases every record below was checked against: the floors in pyproject.toml (bench/floors.sh installs them
# and runs the unit tier and tests/test_internals.py) and the newest installed while writing this.
CHECKED = {"lm-eval": "0.4.12 (the floor) and 0.4.13", "transformers": "4.56.0 (the floor) and 5.23.0"}


@dataclass(frozen=True)
class Internal:
    """One internal: where it lives and what of it layerprobe uses (each part checked by `problems`)."""

    name: str  # what layerprobe's modules import from here
    library: str  # the distribution: "lm-eval" or "transformers"
    places: tuple[str, ...]  # "module:attribute" or a bare "module", newest release first (later ones: fallbacks)
    used_for: str  # where layerprobe uses it, and for what
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)  # method ("" = itself) -> keywords passed
    attributes: tuple[str, ...] = ()  # class attributes and methods layerprobe reads, calls or overrides
    source: tuple[str, ...] = ()  # text its module's source must hold: attributes set in __init__, messages filtered
    files: tuple[str, ...] = ()  # files a module's folder must hold (paths relative to it)


INTERNALS = (
    Internal("HFLM", "lm-eval", ("lm_eval.models.huggingface:HFLM",),
             "evaluation/harness.py wraps the loaded model in it for every lm-eval sweep, turns off its progress bars "
             "and drops two of its module logger's warnings by their text; evaluation/shared_lm.py subclasses it "
             "(SharedPrefixLM): overrides loglikelihood and the private _loglikelihood_tokens, reads backend, "
             "logits_cache, softmax_dtype, max_length, batch_size and device",
             params={"__init__": ("pretrained", "tokenizer", "batch_size", "softmax_dtype"),
                     "_loglikelihood_tokens": ("requests", "disable_tqdm", "override_bs"),
                     "loglikelihood": ("requests", "disable_tqdm"),
                     "loglikelihood_rolling": ("requests", "disable_tqdm"),
                     "generate_until": ("requests", "disable_tqdm")},
             attributes=("max_length", "prefix_token_id"),
             source=("self.backend", "self.logits_cache", "self.softmax_dtype",
                     "`pretrained` model kwarg is not of type `str`", "Passed an already-initialized model through")),
    Internal("Collator", "lm-eval", ("lm_eval.models.utils:Collator",),
             "evaluation/shared_lm.py orders, batches and groups the shared pass's requests exactly as HFLM does "
             "(one row answers every one-token continuation of a context), so the numbers equal the per-variant path",
             params={"__init__": ("arr", "sort_fn", "group_fn", "group_by"), "get_batched": ("n", "batch_fn"),
                     "get_cache": ("req_str", "cxt_toks", "cont_toks", "logits")}),
    Internal("pad_and_concat", "lm-eval", ("lm_eval.models.utils_hf:pad_and_concat",
                                           "lm_eval.models.utils:pad_and_concat"),
             "evaluation/shared_lm.py pads a batch as HFLM does (right padding, no attention mask); in lm_eval.models."
             "utils up to lm-eval 0.4.9",
             params={"": ("max_length", "tensors", "padding_side")}),
    Internal("register_model", "lm-eval", ("lm_eval.api.registry:register_model",),
             "evaluation/shared_lm.py registers SharedPrefixLM as the model 'layerprobe-shared'"),
    Internal("ConfigurableTask", "lm-eval", ("lm_eval.api.task:ConfigurableTask",),
             "evaluation/local_data.py wraps its __init__ to fit a task's splits to a local copy and answers its "
             "dataset download by replacing datasets.load_dataset, which the task calls through the module; "
             "evaluation/harness.py wraps build_all_requests to build a task's requests once per sweep and refills "
             "the private _instances with fresh copies; both read config, set_fewshot_seed, get_config, set_config",
             params={"__init__": ("config",), "set_fewshot_seed": ("seed",), "set_config": ("key", "value")},
             attributes=("build_all_requests", "get_config"),
             source=("datasets.load_dataset(", "self._instances")),
    Internal("TaskManager", "lm-eval", ("lm_eval.tasks:TaskManager",),
             "evaluation/harness.py indexes the tasks (local YAML first) and loads one by name with load() (new in "
             "lm-eval 0.4.12, hence its floor)",
             params={"__init__": ("include_path", "include_defaults"), "load": ("task_list",)},
             attributes=("all_tasks",)),
    Internal("TaskIndex", "lm-eval", ("lm_eval.tasks._index:TaskIndex",),
             "evaluation/harness.py replaces its static build(paths, resolve_includes) while a TaskManager is built, "
             "so that lm-eval's own task folder (the module's own folder, which TaskManager indexes first) is "
             "indexed once per process; build indexes each folder on its own and merges them in order. Optional: "
             "without it (an older lm-eval) every manager indexes lm-eval's tasks again",
             params={"build": ("paths", "resolve_includes")}, attributes=("build",)),
    Internal("evaluate", "lm-eval", ("lm_eval.evaluator:evaluate",),
             "evaluation/harness.py evaluates every variant on the task objects built once (simple_evaluate would "
             "rebuild them)",
             params={"": ("lm", "task_dict", "limit", "bootstrap_iters", "log_samples", "verbosity")}),
    Internal("lm_eval_tasks", "lm-eval", ("lm_eval.tasks",),
             "evaluation/mmlu.py copies lm-eval's own MMLU task YAMLs from this package's folder, pointing them at a "
             "local MMLU file",
             files=("mmlu/default/_default_template_yaml",)),
    Internal("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "transformers",
             ("transformers.models.auto.modeling_auto:MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
             "commands/angular/run.py (lens_head): whether a model type has a causal-LM head, from its config alone"),
    Internal("PreTrainedModel", "transformers", ("transformers:PreTrainedModel",),
             "models/inhouse/modeling.py fills its private hooks _init_weights, _no_split_modules and "
             "_tied_weights_keys (a dict, transformers 5's form; an empty one reads the same in 4.x); "
             "commands/gradnorm/run.py rebuilds a loaded model untrained with the private classmethod _from_config "
             "(--reinit)",
             attributes=("_init_weights", "_no_split_modules", "_tied_weights_keys", "_from_config", "post_init")),
    Internal("Conv1D", "transformers", ("transformers.pytorch_utils:Conv1D",),
             "models/layers.py (LINEAR_CLASSES) matches GPT-2's projections by this class name, for LoRA's targets, "
             "without importing transformers"),
    Internal("load_gguf_checkpoint", "transformers", ("transformers.modeling_gguf_pytorch_utils:load_gguf_checkpoint",),
             "models/gguf.py (_parsed_once) shares one gguf.GGUFReader per file through a GGUF conversion: "
             "transformers imports the reader from the gguf package at call time, once for the config, the tokenizer "
             "and the weights each (if it stops doing so, a conversion is only slower)",
             source=("from gguf import GGUFReader",)),
    Internal("Cache", "transformers", ("transformers.cache_utils:Cache",),
             "evaluation/prefix_cache.py finds the keyword under which every block receives the key/value cache "
             "(isinstance), to hand a block replay another cache"),
    Internal("DynamicCache", "transformers", ("transformers.cache_utils:DynamicCache",),
             "evaluation/prefix_cache.py builds a few-shot prefix's cache per variant (an empty one, filled by the "
             "blocks a replay runs) and fills one per batch with update(keys, values, layer index); reads its "
             "layers (one per layer index, created on first update)",
             params={"update": ("key_states", "value_states", "layer_idx")}, source=("self.layers",)),
    Internal("DynamicLayer", "transformers", ("transformers.cache_utils:DynamicLayer",),
             "evaluation/prefix_cache.py reads a full-attention cache layer's keys, values and is_initialized (a "
             "layer of any other class, e.g. sliding-window, makes the sweep fall back to whole requests)",
             attributes=("update",), source=("self.keys", "self.values", "self.is_initialized")),
    Internal("OutputRecorder", "transformers", ("transformers.utils.output_capturing:OutputRecorder",
                                                "transformers.utils.generic:OutputRecorder"),
             "metrics/router.py finds the MoE routers from each model class's private _can_record_outputs"
             "['router_logits'], an OutputRecorder: its target_class and index (utils.generic in transformers 4.56)",
             params={"__init__": ("target_class", "index")}),
)

BY_NAME = {item.name: item for item in INTERNALS}


def locate(item: Internal) -> tuple[Any, str]:
    """(the object, the place it was found at), trying item.places in order; ImportError naming the internal."""
    tried = []
    for place in item.places:
        module_name, _, attribute = place.partition(":")
        try:
            found = importlib.import_module(module_name)
            for part in attribute.split(".") if attribute else ():
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            tried.append(f"{place} ({type(exc).__name__}: {exc})")
            continue
        return found, place
    raise ImportError(f"{item.library}'s {item.name} is at none of {', '.join(tried)}: layerprobe was checked with "
                      f"{item.library} {CHECKED[item.library]} (see layerprobe/internals.py).")


def problems(item: Internal) -> list[str]:
    """What of `item` is not as layerprobe uses it in the installed release (empty: all of it is)."""
    try:
        found, place = locate(item)
    except ImportError as exc:
        return [str(exc)]
    issues = []
    attribute = place.partition(":")[2].rsplit(".", 1)[-1]
    if inspect.isclass(found) and attribute and found.__name__ != attribute:
        issues.append(f"{place} is the class {found.__name__}, not {attribute}")
    for method, keywords in item.params.items():
        target = getattr(found, method, None) if method else found
        if target is None:
            issues.append(f"{place} has no {method}")
            continue
        accepted = inspect.signature(target).parameters  # by name: a **kwargs that swallows anything is no answer
        missing = [k for k in keywords if k not in accepted]
        if missing:
            issues.append(f"{place}{'.' + method if method else ''} takes no {', '.join(missing)}")
    issues += [f"{place} has no {a}" for a in item.attributes if not hasattr(found, a)]
    if item.source:
        module = found if inspect.ismodule(found) else inspect.getmodule(found)
        text = inspect.getsource(module)
        issues += [f"{module.__name__}'s source no longer holds {s!r}" for s in item.source if s not in text]
    if item.files:
        folder = Path(found.__file__).parent
        issues += [f"{folder} holds no {f}" for f in item.files if not (folder / f).is_file()]
    return issues


def __getattr__(name: str) -> Any:
    item = BY_NAME.get(name)
    if item is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found, _ = locate(item)
    globals()[name] = found  # imported once
    return found


def __dir__() -> list[str]:
    return sorted([*globals(), *BY_NAME])


if __name__ == "__main__":  # python -m layerprobe.internals: is every internal where and as layerprobe uses it?
    import sys
    from importlib.metadata import version

    failed = 0
    for item in INTERNALS:
        issues = problems(item)
        failed += bool(issues)
        print(f"{'ok  ' if not issues else 'FAIL'} {item.library} {version(item.library)}: {item.name}")
        for issue in issues:
            print(f"       {issue}")
    sys.exit(1 if failed else 0)
