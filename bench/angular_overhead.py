"""Angular pass vs a plain forward over the same batches, same batch size, in one run: prints the ratio.

    python bench/angular_overhead.py [--model minilm] [--tokens 32768] [--seq-len 256] [--batch-size 8]
    python bench/angular_overhead.py --arch llama-7b --device cuda --dtype bfloat16 --tokens 262144 --seq-len 1024

Target: ratio <= 1.10 (CPU and GPU). Runs are interleaved and the median taken, since these machines are noisy.
Also prints the peak memory growth between a short and a 4x longer run (flat memory in --tokens): RSS on the CPU,
torch's peak allocated GPU memory on CUDA; and on CUDA the model FLOP utilization of the angular pass against the
GPU's bf16 dense peak (--peak-tflops) and against one large bf16 matmul measured in the same run.
With --arch the in-house model is built at init directly on the device (no checkpoint written or read); the corpus
is cycled when it holds fewer tokens than --tokens (Python's docs hold about 100K).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from layerprobe.data.corpora import open_corpus  # noqa: E402
from layerprobe.data.packing import batches  # noqa: E402
from layerprobe.hooks import BlockCapture  # noqa: E402
from layerprobe.metrics.angular import AngularAccumulator  # noqa: E402
from layerprobe.models.layers import find_blocks  # noqa: E402
from layerprobe.models.load import load_model  # noqa: E402


def plain(model, data):
    with torch.inference_mode():
        for ids, mask in data:
            model(input_ids=ids, attention_mask=mask)
    sync()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def inhouse(arch: str, device: str, dtype: str):
    """An in-house model at init, built in its dtype on the device, with the embedded tokenizer: (model, tok, device)."""
    import transformers

    from layerprobe.models.inhouse import build, make_config
    from layerprobe.models.load import embedded_model_dir, resolve_device, resolve_dtype

    device = resolve_device(device)
    tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    torch.manual_seed(0)
    model = build(make_config(arch, "pre", vocab_size=len(tok)), device, getattr(torch, resolve_dtype(dtype, device)))
    return model.eval(), tok, device


def cycled(texts_fn, tokens: int):
    """The corpus's documents, started over as often as needed for `tokens` (a throughput bench, not a measurement)."""
    while True:
        yield from texts_fn()


def forward_flops(model, tokens: int, seq_len: int) -> float:
    """Matmul FLOPs of one forward over `tokens` (blocks + LM head; causal attention counted at half)."""
    cfg = model.config
    d, f, layers, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    kv = d * getattr(cfg, "num_key_value_heads", cfg.num_attention_heads) // cfg.num_attention_heads
    block = 2 * tokens * (2 * d * d + 2 * d * kv + 3 * d * f)
    attention = 2 * tokens * seq_len * d  # QK^T and PV, causal half of 2 x 2 x t x s x d
    return layers * (block + attention) + 2 * tokens * d * vocab


def matmul_tflops(device: str, dtype) -> float:
    """One 8192^3 matmul in the model's dtype, median of 10: what this GPU reaches in practice."""
    a = torch.randn(8192, 8192, device=device, dtype=dtype)
    b = torch.randn(8192, 8192, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        sync()
        t = time.perf_counter()
        a @ b
        sync()
        times.append(time.perf_counter() - t)
    return 2 * 8192**3 / statistics.median(times) / 1e12


def peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return rss_mib()


def angular(model, stack, data):
    acc = AngularAccumulator(len(stack) + 1, device=str(data[0][0].device))
    with BlockCapture(stack) as capture, torch.inference_mode():
        for ids, mask in data:
            model(input_ids=ids, attention_mask=mask)
            acc.update(capture.states, mask.flatten().nonzero().squeeze(1))
    result = acc.result()
    sync()
    return result


def product_setup(args):
    """The product's own pass (commands.angular.run._measure, with its checkpoint as the CLI makes it) on a Probe of
    --model, and a bare forward over the same tokenizing stream: (product, bare) zero-argument callables."""
    import tempfile
    from pathlib import Path

    from layerprobe.commands.angular.run import _measure
    from layerprobe.commands.probe import open_probe
    from layerprobe.config import AngularConfig, DataOptions, ModelOptions
    from layerprobe.distributed import current_world
    from layerprobe.runs.resume import PassCheckpoint

    config = AngularConfig(model=ModelOptions(args.model, dtype=args.dtype, device=args.device),
                           data=DataOptions(args.dataset, tokens=args.tokens, seq_len=args.seq_len, batch_size=args.batch_size),
                           lens_tokens=0)
    probe = open_probe(config.model, config.data, head="base")
    folder = Path(tempfile.mkdtemp(prefix="angular-bench-"))

    def product():
        checkpoint = PassCheckpoint(folder, {"bench": 1}, every=config.save_every)
        checkpoint.clear()  # every repeat is a whole pass, as a fresh run's
        _measure(config, probe, current_world(), lambda *a: None, checkpoint, lens=False)
        sync()

    def bare():
        with torch.inference_mode():
            for b in batches(probe.corpus.texts(), probe.tokenizer, probe.seq_len, args.batch_size, args.tokens):
                probe.model.base_model(input_ids=b.input_ids.to(probe.device),
                                       attention_mask=b.attention_mask.to(probe.device))
        sync()

    return product, bare


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--dataset", default="builtin")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arch", default=None, help="An in-house size at init instead of --model, e.g. llama-7b.")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the GPU's dense bf16 peak for the utilization line (H100 SXM: 989)")
    args = parser.parse_args()

    if args.arch:
        model, tokenizer, device = inhouse(args.arch, args.device, args.dtype)
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    else:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device)
        model, tokenizer, device, dtype = loaded.model, loaded.tokenizer, loaded.device, loaded.dtype
    stack = find_blocks(model)
    corpus = open_corpus(args.dataset)
    data = [(b.input_ids, b.attention_mask) for b in
            batches(cycled(corpus.texts, args.tokens), tokenizer, args.seq_len, args.batch_size, args.tokens)]
    data = [(ids.to(device), mask.to(device)) for ids, mask in data]
    tokens = sum(int(m.sum()) for _, m in data)
    plain(model, data[:2])  # warm-up
    times = {"plain": [], "angular": []}
    for _ in range(args.repeats):
        for name, fn in (("plain", lambda: plain(model, data)), ("angular", lambda: angular(model, stack, data))):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base, probe = statistics.median(times["plain"]), statistics.median(times["angular"])
    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    print(f"model={args.arch or args.model} device={device} ({where}) dtype={dtype} layers={len(stack)} "
          f"tokens={tokens} seq_len={args.seq_len} batch={args.batch_size}")
    print(f"plain forward   {base:8.3f} s  ({tokens / base:,.0f} tok/s)")
    print(f"angular pass    {probe:8.3f} s  ({tokens / probe:,.0f} tok/s)")
    print(f"ratio angular/plain = {probe / base:.3f}  (target <= 1.10)")
    if device.startswith("cuda"):
        flops = forward_flops(model, tokens, args.seq_len)
        achieved = flops / probe / 1e12
        matmul = matmul_tflops(device, next(model.parameters()).dtype)
        print(f"model FLOPs {flops / 1e15:.2f} PFLOP per pass: angular pass at {achieved:.0f} TFLOP/s = "
              f"{achieved / args.peak_tflops:.1%} of the {args.peak_tflops:.0f} TFLOP/s dense peak (target >= 30%); "
              f"one 8192^3 matmul here: {matmul:.0f} TFLOP/s (angular pass at {achieved / matmul:.1%} of it)")

    if not args.arch:  # the product's own pass, checkpoint and tokenizing stream included, against a bare forward
        product, bare = product_setup(args)
        bare()  # warm-up
        spans = {"bare": [], "product": []}
        for _ in range(args.repeats):
            for name, fn in (("bare", bare), ("product", product)):
                start = time.perf_counter()
                fn()
                spans[name].append(time.perf_counter() - start)
        b, q = statistics.median(spans["bare"]), statistics.median(spans["product"])
        print(f"bare forward, tokenizing stream   {b:8.3f} s")
        print(f"layerprobe's angular pass (_measure, checkpoint every 60 s)  {q:8.3f} s")
        print(f"ratio product pass/bare forward = {q / b:.3f}  (target <= 1.10)")

    small = data[: max(1, len(data) // 4)]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    angular(model, stack, small)
    before = peak_mib(device)
    angular(model, stack, data)
    kind = "GPU peak allocated" if device.startswith("cuda") else "peak RSS"
    small_tokens = sum(int(m.sum()) for _, m in small)
    print(f"{kind} after {len(small)} batches ({small_tokens:,} tokens): {before:.0f} MiB; after {len(data)} batches "
          f"({tokens:,} tokens): {peak_mib(device):.0f} MiB (growth {peak_mib(device) - before:.0f} MiB)")


if __name__ == "__main__":
    main()
