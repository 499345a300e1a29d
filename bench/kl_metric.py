"""The kl of a sweep's variants: the unpruned model's softmax computed once per batch vs once per variant.

    python bench/kl_metric.py [--positions 512] [--vocab 49152] [--variants 30] [--repeats 3]

Random logits of SmolLM2's shape (512 positions of a 49,152-word head, 30 variants: the demo's kl sweep). The
plain baseline recomputes log_softmax and softmax of the unpruned logits for every variant (what layerprobe did
before); `Original` computes them once. Prints both wall times (median of --repeats), their ratio, and the largest
difference of the sums (0: the same operations on the same numbers).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from layerprobe.evaluation.taskfree import Original, metric_sum


def plain(original: torch.Tensor, variants: list[torch.Tensor]) -> list[float]:
    out = []
    for pruned in variants:
        log_p = torch.log_softmax(original.float(), dim=-1)
        log_q = torch.log_softmax(pruned.float(), dim=-1)
        out.append(float((log_p.exp() * (log_p - log_q)).sum(-1).double().sum()))
    return out


def once(original: torch.Tensor, variants: list[torch.Tensor], ids: torch.Tensor) -> list[float]:
    reference = Original("kl", original)
    return [metric_sum("kl", reference, pruned, ids)[0] for pruned in variants]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--variants", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    shape = (2, args.positions // 2, args.vocab)
    original = torch.randn(shape, generator=generator)
    variants = [original + 0.1 * torch.randn(shape, generator=generator) for _ in range(args.variants)]
    ids = torch.zeros(shape[:2], dtype=torch.long)
    times: dict[str, list[float]] = {"plain": [], "once": []}
    results = {}
    for _ in range(args.repeats):  # alternated, so drifting machine load hits both alike
        for name, run in (("plain", lambda: plain(original, variants)), ("once", lambda: once(original, variants, ids))):
            start = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - start)
    plain_s, once_s = statistics.median(times["plain"]), statistics.median(times["once"])
    difference = max(abs(a - b) for a, b in zip(results["plain"], results["once"]))
    print(f"{args.variants} variants x {args.positions} positions x {args.vocab} words, {torch.get_num_threads()} "
          f"threads: per variant {plain_s:.2f} s, once per batch {once_s:.2f} s, ratio {once_s / plain_s:.2f}; "
          f"largest difference of the sums {difference:.3g}")


if __name__ == "__main__":
    main()
