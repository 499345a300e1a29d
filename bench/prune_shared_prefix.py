"""Shared-prefix task-free pruning vs the naive loop (delete layer, full forward), same numbers, one run.

    python bench/prune_shared_prefix.py [--metric ppl|kl|drift] [--layers 12] [--hidden 512] [--tokens 4096]

Builds a seeded 12-layer LLaMA from a config (no download), saves it with the embedded MiniLM tokenizer and loads
it through layerprobe. Prints both wall times, the ratio (target <= 0.6 in issue 3), and the ratio of
block-forwards, which is what the method saves: the LM head and softmax are paid per variant either way.

The compute floor (issue 40: the sweep at <= 1.15x it) is the same arithmetic as plain transformers calls with no
layerprobe in the loop: one forward of the whole model keeping its hidden states, then for each variant without
block p one forward of a copy of the model whose layer list is blocks p+1.. only, fed hidden state p as
`inputs_embeds` (the final norm and head included), each scored by the same metric sum. Its numbers must match.
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
from layerprobe.evaluation.taskfree import (METRICS, Original, Sums, finish, metric_rows, score_batch_naive,  # noqa: E402
                                            score_batch_shared)
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


def floor_batch(model, stack, metric: str, variants, ids, mask, sums: Sums) -> None:
    """The floor: plain HF forwards of exactly the blocks the shared sweep runs (see the module's docstring)."""
    import copy

    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    hidden, original = out.hidden_states, Original(metric, out.logits)  # log p of the unpruned model once
    if metric == "ppl":
        sums.add(None, metric_rows(metric, original, out.logits, ids))
    shell, short = copy.copy(model.model), copy.copy(model)  # the same modules; their own module tables
    shell._modules, short._modules = dict(shell._modules), dict(short._modules)
    short.model = shell
    for variant in variants:
        p = variant.removed[0]
        shell.layers = torch.nn.ModuleList(list(stack.blocks)[p + len(variant.removed):])
        logits = short(inputs_embeds=hidden[p], attention_mask=mask, use_cache=False).logits
        sums.add(variant.label, metric_rows(metric, original, logits, ids))


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
    times: dict[str, list[float]] = {"naive": [], "shared": [], "floor": []}
    results = {}
    with torch.inference_mode():
        score_batch_shared(model, stack, args.metric, variants, *data[0], Sums())  # warm-up
        for _ in range(args.repeats):
            for name, fn in (("naive", score_batch_naive), ("shared", score_batch_shared), ("floor", floor_batch)):
                sums = Sums()
                start = time.perf_counter()
                for ids, mask in data:
                    fn(model, stack, args.metric, variants, ids, mask, sums)
                times[name].append(time.perf_counter() - start)
                results[name] = [finish(args.metric, *sums.variants[v.label]) for v in variants]
    worst = max(abs(a - b) / max(abs(a), 1e-12) for other in ("shared", "floor")
                for a, b in zip(results["naive"], results[other]))
    naive, shared = statistics.median(times["naive"]), statistics.median(times["shared"])
    floor = statistics.median(times["floor"])
    layers = len(stack)
    print(f"metric={args.metric} layers={layers} hidden={args.hidden} vocab={model.config.vocab_size} "
          f"tokens={sum(int(m.sum()) for _, m in data)} threads={torch.get_num_threads()}")
    print(f"naive loop      {naive:8.3f} s")
    print(f"shared prefix   {shared:8.3f} s")
    print(f"compute floor   {floor:8.3f} s  (plain HF forwards of the same blocks and heads)")
    print(f"ratio shared/naive = {shared / naive:.3f}  (target <= 0.6); max relative difference {worst:.2e}")
    print(f"ratio shared/floor = {shared / floor:.3f}  (target <= 1.15); floor/naive = {floor / naive:.3f}")
    blocks_naive = layers + layers * (layers - 1)
    blocks_shared = layers + layers * (layers - 1) // 2
    print(f"block-forwards: naive {blocks_naive}, shared {blocks_shared} (ratio {blocks_shared / blocks_naive:.3f}); "
          f"LM-head passes: {layers + 1} in both")


if __name__ == "__main__":
    main()
