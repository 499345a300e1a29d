"""Angular pass vs a plain forward over the same batches, same batch size, in one run: prints the ratio.

    python bench/angular_overhead.py [--model minilm] [--tokens 32768] [--seq-len 256] [--batch-size 8]
    python bench/angular_overhead.py --arch llama-7b --device cuda --dtype bfloat16   # an in-house size on a GPU

Target (issue 2): ratio <= 1.10 on CPU. Runs are interleaved and the median taken, since these machines are noisy.
Also prints the peak RSS growth between a short and a 4x longer run (flat memory in --tokens).
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


def inhouse_folder(arch: str, device: str, dtype: str, root: str) -> str:
    """An in-house model at init (built in its dtype on the device) saved with the embedded tokenizer."""
    import transformers

    from layerprobe.models.inhouse import build, make_config
    from layerprobe.models.load import embedded_model_dir, resolve_device, resolve_dtype

    device = resolve_device(device)
    tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    torch.manual_seed(0)
    model = build(make_config(arch, "pre", vocab_size=len(tok)), device, getattr(torch, resolve_dtype(dtype, device)))
    model.save_pretrained(root)
    tok.save_pretrained(root)
    del model
    return root


def angular(model, stack, data):
    acc = AngularAccumulator(len(stack) + 1, device=str(data[0][0].device))
    with BlockCapture(stack) as capture, torch.inference_mode():
        for ids, mask in data:
            model(input_ids=ids, attention_mask=mask)
            acc.update(capture.states, mask.flatten().nonzero().squeeze(1))
    result = acc.result()
    sync()
    return result


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
    args = parser.parse_args()

    if args.arch:
        import tempfile

        args.model = inhouse_folder(args.arch, args.device, args.dtype, tempfile.mkdtemp(prefix="layerprobe-bench-"))
    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    if args.arch:
        import shutil

        shutil.rmtree(args.model)  # loaded: the saved copy is no longer needed
    stack = find_blocks(loaded.model)
    data = [(b.input_ids, b.attention_mask) for b in
            batches(open_corpus(args.dataset).texts(), loaded.tokenizer, args.seq_len, args.batch_size, args.tokens)]
    data = [(ids.to(loaded.device), mask.to(loaded.device)) for ids, mask in data]
    tokens = sum(int(m.sum()) for _, m in data)
    plain(loaded.model, data[:2])  # warm-up
    times = {"plain": [], "angular": []}
    for _ in range(args.repeats):
        for name, fn in (("plain", lambda: plain(loaded.model, data)), ("angular", lambda: angular(loaded.model, stack, data))):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base, probe = statistics.median(times["plain"]), statistics.median(times["angular"])
    print(f"model={args.arch or args.model} device={loaded.device} dtype={loaded.dtype} layers={len(stack)} tokens={tokens} seq_len={args.seq_len} batch={args.batch_size} "
          f"threads={torch.get_num_threads()}")
    print(f"plain forward   {base:8.3f} s  ({tokens / base:,.0f} tok/s)")
    print(f"angular pass    {probe:8.3f} s  ({tokens / probe:,.0f} tok/s)")
    print(f"ratio angular/plain = {probe / base:.3f}  (target <= 1.10)")

    small = data[: max(1, len(data) // 4)]
    angular(loaded.model, stack, small)
    before = rss_mib()
    angular(loaded.model, stack, data)
    print(f"peak RSS after {len(small)} batches: {before:.0f} MiB; after {len(data)} batches: {rss_mib():.0f} MiB "
          f"(growth {rss_mib() - before:.0f} MiB)")


if __name__ == "__main__":
    main()
