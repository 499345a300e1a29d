"""Offline fixtures: tiny real models built from configs and saved to folders, the packaged MiniLM."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

# The suite's own cache (GGUF conversions, the assembled Gemma 3): never the user's ~/.cache/layerprobe, one
# conversion per run shared by the tests that do not make a cache of their own
_CACHE = tempfile.mkdtemp(prefix="layerprobe-test-cache-")
# matplotlib keeps its font list in $XDG_CACHE_HOME/matplotlib (without MPLCONFIGDIR): the user's copied in, where
# there is one, so a session does not rebuild it from every font file (~0.5 s at the first figure drawn)
_FONTS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib"
for _list in () if os.environ.get("MPLCONFIGDIR") else _FONTS.glob("fontlist-*.json"):
    (Path(_CACHE) / "matplotlib").mkdir(exist_ok=True)
    shutil.copy2(_list, Path(_CACHE) / "matplotlib" / _list.name)
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of `-n 2`'s workers on a 2-core machine: one thread each, and in
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the commands they start (torchrun, killed runs)
        os.environ.setdefault(_name, "1")

import pytest  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):  # torch is imported where a test uses it (the unit tier mostly does not)
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ARCHS = ("llama", "qwen2", "gpt2", "bert")
# Where each architecture's final norm lives in its base model (None: no final norm, BERT is Post-LN).
FINAL_NORM = {"llama": "norm", "qwen2": "norm", "gpt2": "ln_f", "bert": None}


def tiny_config(arch: str, vocab: int, bos: int, eos: int, layers: int = 4):
    import transformers

    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, max_position_embeddings=128)
    if arch == "llama":
        return transformers.LlamaConfig(**common, num_key_value_heads=2, bos_token_id=bos, eos_token_id=eos, pad_token_id=0)
    if arch == "qwen2":
        return transformers.Qwen2Config(**common, num_key_value_heads=2, bos_token_id=bos, eos_token_id=eos, pad_token_id=0)
    if arch == "gpt2":
        return transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=layers, n_head=4, n_positions=128,
                                       bos_token_id=bos, eos_token_id=eos)
    if arch == "bert":
        return transformers.BertConfig(**common)
    raise ValueError(arch)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from layerprobe.models.load import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="session")
def tokenizer(minilm_dir):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    tok.bos_token = "[CLS]"
    tok.eos_token = "[SEP]"
    return tok


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """arch -> folder with a seeded tiny model (causal LM head, MLM head for BERT) and the tokenizer."""
    import torch
    import transformers

    root = tmp_path_factory.mktemp("models")
    folders = {}
    for arch in ARCHS:
        torch.manual_seed(0)
        config = tiny_config(arch, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
        cls = transformers.BertForMaskedLM if arch == "bert" else transformers.AutoModelForCausalLM
        model = cls.from_config(config) if cls is transformers.AutoModelForCausalLM else cls(config)
        folder = root / arch
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[arch] = folder
    return folders


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """A small English .txt corpus (Python's docs), documents separated by blank lines."""
    from pydoc_data.topics import topics

    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)[:20]), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path_factory, monkeypatch):
    """Every test runs in a working directory of its own: a default run folder (reports/<model>/...) never lands
    in the clone. Made by mkdtemp under the session's temp folder (cleaned as pytest cleans it): mktemp's numbered
    name lists the folder each time, which grows with every test."""
    import tempfile

    monkeypatch.chdir(tempfile.mkdtemp(prefix="cwd-", dir=tmp_path_factory.getbasetemp()))


@pytest.fixture
def added():
    """The dummy's metric and strategy registered (one line each), and removed after."""
    from layerprobe.evaluation.metric import METRICS, register_metric
    from layerprobe.strategies import STRATEGIES, register_strategy
    from tests.data.dummy_command import METRIC, STRATEGY

    register_metric(METRIC)
    register_strategy(STRATEGY)
    yield METRIC, STRATEGY
    METRICS.pop(METRIC.name, None)
    STRATEGIES.pop(STRATEGY.name, None)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A user cache of the test module's own (GGUF conversions, the assembled Gemma 3): made once per module."""
    root = tmp_path_factory.mktemp("xdg")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(root)
    yield root
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


# ---- the extended tier: real-model twins of cheaper tests, run with --extended ---------------------------------

def pytest_addoption(parser):
    parser.addoption("--extended", action="store_true",
                     help="Also run the extended tier (tests marked extended: second real-model or Trainer twins of "
                          "what the default run covers more cheaply; minutes on 2 cores).")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--extended"):
        return
    skip = pytest.mark.skip(reason="extended tier: run with --extended (a cheaper test covers it by default)")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)
