"""lm-eval pruning sweeps: per-variant vs shared-prefix, overhead beyond forwards, and against the lm_eval CLI.

    python bench/prune_lmeval_overhead.py [--layers 12] [--hidden 512] [--docs 200] [--cli-runs 13]
    python bench/prune_lmeval_overhead.py --arch llama-1b --device cuda --dtype bfloat16 --docs 1000 --cli-runs 0

Builds a seeded LLaMA from a config (no download) and a local multiple-choice YAML task from Python's docs,
then in one run:
  1. layerprobe's per-variant sweep (baseline + one variant per layer, tasks built once, one model in memory),
     with hooks timing every forward of the model: time outside forwards = (variant wall - forward time) /
     variant wall (target < 5%); each variant against plain lm-eval `evaluate` on a saved pruned checkpoint of
     the same size loaded on its own (what layerprobe's surgery and bookkeeping add);
  1b. the shared-prefix sweep (the default): wall time against the per-variant sweep (target <= 0.6x, issue 8),
     same accuracies;
  2. the usual alternative: save each pruned checkpoint and run `lm_eval --model hf` once per variant
     (`--cli-runs K` runs the first K and extrapolates), checking the accuracies agree with the sweep's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402

from layerprobe.evaluation.harness import HarnessTask, wrap_model  # noqa: E402
from layerprobe.evaluation.variants import sweep  # noqa: E402
from layerprobe.models.layers import find_blocks  # noqa: E402
from layerprobe.models.load import embedded_model_dir, load_model  # noqa: E402
from layerprobe.models.surgery import removed_layers  # noqa: E402
from layerprobe.commands.prune.outputs import COLUMNS  # noqa: E402
from layerprobe.commands.prune.sweeps import SweepJob, evaluate_variants  # noqa: E402
from layerprobe.runs.resume import Ledger  # noqa: E402


def build_model(folder: Path, layers: int, hidden: int, arch: str | None = None, device: str = "cpu",
                dtype: str = "float32") -> None:
    """A seeded transformers LLaMA (the shape of in-house size `arch` when given), saved in `dtype`."""
    tok = transformers.AutoTokenizer.from_pretrained(embedded_model_dir())
    tok.bos_token, tok.eos_token = "[CLS]", "[SEP]"
    torch.manual_seed(0)
    if arch:
        from layerprobe.models.inhouse import SIZES

        shape = SIZES[arch]
    else:
        shape = dict(hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                     num_attention_heads=max(1, hidden // 64))
    config = transformers.LlamaConfig(vocab_size=len(tok), **shape, max_position_embeddings=1024,
                                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0)
    with torch.device(device):  # a 1B model initializes in seconds on a GPU, minutes on a CPU
        model = transformers.LlamaForCausalLM(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    del model
    tok.save_pretrained(folder)


def build_task(folder: Path, docs: int) -> None:
    """Four-way multiple choice: a 40-word passage of the Python docs, pick the word that follows it."""
    from pydoc_data.topics import topics

    words = " ".join(topics[k] for k in sorted(topics)).split()
    rng = random.Random(0)
    with open(folder / "mc.jsonl", "w", encoding="utf-8") as f:
        for _ in range(docs):
            at = rng.randrange(0, len(words) - 50)
            choices = [words[at + 40]] + [words[rng.randrange(len(words))] for _ in range(3)]
            f.write(json.dumps({"question": " ".join(words[at:at + 40]), "choices": choices, "answer": 0}) + "\n")
    (folder / "bench_mc.yaml").write_text(
        "task: bench_mc\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'mc.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )


class ForwardClock:
    """Seconds spent inside model.forward (CPU: synchronous, so wall time of the call)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.total, self._start = 0.0, 0.0
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.total += time.perf_counter() - self._start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cli-runs", type=int, default=None, help="lm_eval CLI runs (default: every variant; 0: none)")
    parser.add_argument("--arch", default=None, help="the shape of an in-house size instead of --layers/--hidden")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(min(2, os.cpu_count() or 1))

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "model").mkdir()
        (tmp / "tasks").mkdir()
        build_model(tmp / "model", args.layers, args.hidden, args.arch, args.device, args.dtype)
        build_task(tmp / "tasks", args.docs)

        # 1. layerprobe's sweeps, exactly the code path of `layerprobe prune --task bench_mc [--no-shared-prefix]`
        t0 = time.perf_counter()
        task = HarnessTask("bench_mc", str(tmp / "tasks")).build()
        loaded = load_model(str(tmp / "model"), head="causal-lm", device=args.device, dtype=args.dtype)
        setup = time.perf_counter() - t0
        stack = find_blocks(loaded.model)
        variants = sweep(len(stack), 1, None)
        clock = ForwardClock(loaded.model)
        sweeps = {}
        for mode in ("per-variant", "shared-prefix"):
            shared = mode == "shared-prefix"
            lm = wrap_model(loaded.model, loaded.tokenizer, args.batch_size, stack, variants if shared else None)
            compute = [0.0]
            if shared:  # time spent computing (original forward, block replays, tails) in the shared pass
                inner = lm._variant_logprobs

                def timed(*a, _inner=inner):
                    t = time.perf_counter()
                    try:
                        return _inner(*a)
                    finally:
                        compute[0] += time.perf_counter() - t

                lm._variant_logprobs = timed
            stamps: list[tuple[float, float]] = []

            def progress(stage, done, total):
                stamps.append((time.perf_counter(), clock.total))

            (tmp / mode).mkdir()
            ledger = Ledger(tmp / mode, {"bench": 1}, resume=False, columns=COLUMNS, table="prune")

            def select(label, _lm=lm, _shared=shared):
                if _shared:
                    _lm.active = label

            start, fwd0 = time.perf_counter(), clock.total
            with torch.inference_mode():
                job = SweepJob(None, SimpleNamespace(model=loaded.model, stack=stack), variants, ledger, progress)
                baseline = evaluate_variants(task.evaluate, lm, job, select)
            sync()
            wall, fwd = time.perf_counter() - start, clock.total - fwd0
            # stamps: start of baseline, then before each variant, then the end
            spans = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(stamps, stamps[1:])]
            acc = {"baseline": baseline["acc"][0]} | {r["removed"]: r["pruned"] for r in ledger.rows if r["metric"] == "acc"}
            sweeps[mode] = {"wall": wall, "fwd": fwd if not shared else compute[0], "spans": spans, "acc": acc}

        shape = loaded.model.config
        where = (torch.cuda.get_device_name() if args.device.startswith("cuda")
                 else f"cpu, {torch.get_num_threads()} threads")
        print(f"model: LLaMA{' ' + args.arch if args.arch else ''} {shape.num_hidden_layers} layers, hidden "
              f"{shape.hidden_size}, {sum(p.numel() for p in loaded.model.parameters()) / 1e9:.2f}B params, "
              f"{loaded.dtype} on {loaded.device} ({where}); task: {args.docs} docs x 4 choices "
              f"({4 * args.docs} requests); batch {args.batch_size}; set-up (tasks + model) {setup:.1f} s")
        plain_sweep, shared_sweep = sweeps["per-variant"], sweeps["shared-prefix"]
        overheads = [(w - f) / w for w, f in plain_sweep["spans"]]
        print(f"per-variant sweep ({len(plain_sweep['spans'])} evaluations): {plain_sweep['wall']:.1f} s, model "
              f"forwards {plain_sweep['fwd']:.1f} s; time outside forwards per evaluation: median "
              f"{statistics.median(overheads):.1%}, max {max(overheads):.1%} (target < 5%)")
        print(f"shared-prefix sweep: {shared_sweep['wall']:.1f} s, computing {shared_sweep['fwd']:.1f} s; time outside "
              f"computing {(shared_sweep['wall'] - shared_sweep['fwd']) / shared_sweep['wall']:.1%}")
        same = all(abs(shared_sweep["acc"][k] - v) < 1e-12 for k, v in plain_sweep["acc"].items())
        print(f"shared-prefix / per-variant wall time = {shared_sweep['wall'] / plain_sweep['wall']:.3f} "
              f"(target <= 0.6); same accuracies: {same}")
        evaluations = len(variants) + 1
        print(f"per evaluation (baseline or variant): per-variant {plain_sweep['wall'] / evaluations:.2f} s, "
              f"shared-prefix {shared_sweep['wall'] / evaluations:.2f} s; per request x evaluation: "
              f"{plain_sweep['wall'] / evaluations / (4 * args.docs) * 1e3:.3f} ms vs "
              f"{shared_sweep['wall'] / evaluations / (4 * args.docs) * 1e3:.3f} ms")
        worst = max(abs(shared_sweep["acc"][k] - v) for k, v in plain_sweep["acc"].items())
        print(f"max |acc(shared) - acc(per-variant)| over {evaluations} evaluations: {worst:.3g}")
        ours = plain_sweep["acc"]
        sweep_wall = shared_sweep["wall"]
        spans = plain_sweep["spans"]

        # plain lm-eval on an independently loaded pruned checkpoint (middle layer removed)
        middle = variants[len(variants) // 2]
        with removed_layers(loaded.model, middle.removed, stack):
            loaded.model.save_pretrained(tmp / "plain")
        loaded.tokenizer.save_pretrained(tmp / "plain")
        plain_model = load_model(str(tmp / "plain"), head="causal-lm", device=args.device, dtype=args.dtype)
        plain_lm = wrap_model(plain_model.model, plain_model.tokenizer, args.batch_size)  # plain HFLM
        plain = []
        for _ in range(2):
            t0 = time.perf_counter()
            with torch.inference_mode():
                task.evaluate(plain_lm)
            plain.append(time.perf_counter() - t0)
        variant_walls = [wall for wall, _ in spans[1:]]
        print(f"variant in the per-variant sweep vs plain lm-eval evaluate of a pruned checkpoint: median "
              f"{statistics.median(variant_walls):.2f} s vs {min(plain):.2f} s, ratio "
              f"{statistics.median(variant_walls) / min(plain):.3f}")

        # 2. the lm_eval CLI once per variant, each on its own saved pruned checkpoint
        labels = ["baseline"] + [v.label for v in variants]
        runs = len(labels) if args.cli_runs is None else min(args.cli_runs, len(labels))
        if runs == 0:
            return
        lm_eval = [sys.executable, "-m", "lm_eval"]
        cli_times, save_times, agree = [], [], True
        for label in labels[:runs]:
            folder = tmp / f"pruned-{label}"
            t0 = time.perf_counter()
            if label == "baseline":
                loaded.model.save_pretrained(folder)
            else:
                with removed_layers(loaded.model, [int(label)], stack):
                    loaded.model.save_pretrained(folder)
            loaded.tokenizer.save_pretrained(folder)
            save_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run(lm_eval + ["--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
                                      "--tasks", "bench_mc", "--include_path", str(tmp / "tasks"), "--device", "cpu",
                                      "--batch_size", str(args.batch_size), "--output_path", str(tmp / f"out-{label}")],
                           check=True, capture_output=True)
            cli_times.append(time.perf_counter() - t0)
            result = json.loads(next((tmp / f"out-{label}").rglob("results*.json")).read_text())
            acc = result["results"]["bench_mc"]["acc,none"]
            agree &= abs(acc - ours[label]) < 1e-9
            print(f"  lm_eval CLI, {label:>8}: {cli_times[-1]:5.1f} s (+ save {save_times[-1]:.1f} s), "
                  f"acc {acc:.4f} vs sweep {ours[label]:.4f}")
        per_run = statistics.mean(cli_times) + statistics.mean(save_times)
        total_cli = per_run * len(labels)
        ours_total = sweep_wall + setup
        kind = "measured" if runs == len(labels) else f"extrapolated from {runs} runs"
        print(f"lm_eval CLI once per variant ({len(labels)} runs, {kind}): {total_cli:.1f} s; "
              f"layerprobe shared-prefix sweep incl. set-up: {ours_total:.1f} s; ratio sweep/CLI = {ours_total / total_cli:.3f}; "
              f"accuracies agree: {agree}")


if __name__ == "__main__":
    main()
