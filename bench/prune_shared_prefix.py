"""Shared-prefix task-free pruning vs the naive loop (delete layer, full forward), same numbers, one run.

    python bench/prune_shared_prefix.py [--metric ppl|kl|drift] [--layers 12] [--hidden 512] [--tokens 4096]

Builds a seeded 12-layer LLaMA from a config (no download), saves it with the embedded MiniLM tokenizer and loads
it through layerprobe. Prints both wall times, the ratio (target <= 0.6 in issue 3), and the ratio of
block-forwards, which is what the method saves: the LM head and softmax are paid per variant either way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from layerprobe.data.corpora import open_corpus  # noqa: E402
from layerprobe.data.packing import batches  # noqa: E402
from layerprobe.evaluation.taskfree import METRICS, Sums, finish, score_batch_naive, score_batch_shared  # noqa: E402
from layerprobe.evaluation.variants import sweep  # noqa: E402
from layerprobe.models.layers import find_blocks  # noqa: E402
from layerprobe.models.load import embedded_model_dir, load_model  # noqa: E402


def build(folder: str, layers: int, hidden: int) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(embedded_model_dir())
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=3 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                                      max_position_embeddings=1024)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metric", default="kl", choices=list(METRICS))
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        build(folder, args.layers, args.hidden)
        loaded = load_model(folder, head=METRICS[args.metric].head, dtype="float32", device="cpu")
    model, stack = loaded.model, find_blocks(loaded.model)
    variants = sweep(len(stack))
    data = [(b.input_ids, b.attention_mask) for b in
            batches(open_corpus("builtin").texts(), loaded.tokenizer, args.seq_len, args.batch_size, args.tokens)]
    times: dict[str, list[float]] = {"naive": [], "shared": []}
    results = {}
    with torch.inference_mode():
        score_batch_shared(model, stack, args.metric, variants, *data[0], Sums())  # warm-up
        for _ in range(args.repeats):
            for name, fn in (("naive", score_batch_naive), ("shared", score_batch_shared)):
                sums = Sums()
                start = time.perf_counter()
                for ids, mask in data:
                    fn(model, stack, args.metric, variants, ids, mask, sums)
                times[name].append(time.perf_counter() - start)
                results[name] = [finish(args.metric, *sums.variants[v.label]) for v in variants]
    worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(results["naive"], results["shared"]))
    naive, shared = statistics.median(times["naive"]), statistics.median(times["shared"])
    layers = len(stack)
    print(f"metric={args.metric} layers={layers} hidden={args.hidden} vocab={model.config.vocab_size} "
          f"tokens={sum(int(m.sum()) for _, m in data)} threads={torch.get_num_threads()}")
    print(f"naive loop      {naive:8.3f} s")
    print(f"shared prefix   {shared:8.3f} s")
    print(f"ratio shared/naive = {shared / naive:.3f}  (target <= 0.6); max relative difference {worst:.2e}")
    blocks_naive = layers + layers * (layers - 1)
    blocks_shared = layers + layers * (layers - 1) // 2
    print(f"block-forwards: naive {blocks_naive}, shared {blocks_shared} (ratio {blocks_shared / blocks_naive:.3f}); "
          f"LM-head passes: {layers + 1} in both")


if __name__ == "__main__":
    main()
