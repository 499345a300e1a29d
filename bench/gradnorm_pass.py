"""One gradnorm measurement pass vs a plain training-style forward + backward of the same model and batch.

    python bench/gradnorm_pass.py [--arch llama-130m] [--norm pre] [--seq-len 256] [--batch-size 8] [--repeats 3]

Baseline: `model(ids, labels=ids).loss.backward()` through the logits and F.cross_entropy, every gradient kept
(what a plain script would do). layerprobe: `measure()` with its hooks, per-block gradient norms taken as each
gradient completes, the fused LM-head cross-entropy, and embedding/head weight gradients skipped. Also prints
the matmul floor: the pass's matmul FLOPs at the speed of one large float32 matmul measured in the same run.
Runs are interleaved and the median taken; these machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from layerprobe.commands.gradnorm.measure import measure_gradients as measure  # noqa: E402
from layerprobe.cli.memory import keep_freed_memory  # noqa: E402
from layerprobe.models.inhouse import build, make_config  # noqa: E402
from layerprobe.models.layers import find_blocks  # noqa: E402


def matmul_flops(cfg, tokens: int, seq_len: int) -> float:
    """Forward + input-gradient + block weight-gradient matmuls, attention included (causal: half)."""
    d, f, layers, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    block = 2 * tokens * (4 * d * d + 3 * d * f)  # one forward of one block's projections
    attention = 2 * tokens * seq_len * d  # QK^T and PV, causal half of 2 x 2 x t x s x d
    head = 2 * tokens * d * vocab
    return layers * (3 * block + 3.5 * attention) + 2 * head


def plain(model, ids) -> None:
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama-130m")
    parser.add_argument("--norm", default="pre")
    parser.add_argument("--vocab", type=int, default=30522)  # the embedded MiniLM tokenizer's
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI does

    cfg = make_config(args.arch, args.norm, vocab_size=args.vocab, max_position_embeddings=max(1024, args.seq_len))
    torch.manual_seed(0)
    model = build(cfg).eval()
    stack = find_blocks(model)
    ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    a = torch.randn(2048, 2048)
    b = torch.randn(2048, 2048)
    times: dict[str, list[float]] = {"plain": [], "layerprobe": [], "matmul": []}
    plain(model, ids)  # warm-up: allocator, kernels
    measure(model, stack, [(ids, mask)], False, None, 0)
    for _ in range(args.repeats):
        for name, run in (("plain", lambda: plain(model, ids)),
                          ("layerprobe", lambda: measure(model, stack, [(ids, mask)], False, None, 0)),
                          ("matmul", lambda: [a @ b for _ in range(10)])):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    gflops = 10 * 2 * 2048**3 / med["matmul"] / 1e9
    floor = matmul_flops(cfg, args.batch_size * args.seq_len, args.seq_len) / (gflops * 1e9)
    print(f"{args.arch} {args.norm}, {args.batch_size} x {args.seq_len} tokens, {torch.get_num_threads()} threads")
    print(f"plain fwd+bwd        {med['plain']:.2f} s")
    print(f"layerprobe measure   {med['layerprobe']:.2f} s   ratio to plain {med['layerprobe'] / med['plain']:.3f}")
    print(f"matmul floor         {floor:.2f} s   ({gflops:.0f} GFLOP/s on 2048^3)   layerprobe / floor "
          f"{med['layerprobe'] / floor:.3f}")


if __name__ == "__main__":
    main()
