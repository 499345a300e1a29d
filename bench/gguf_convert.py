"""A first GGUF conversion: plain transformers (tokenizer, then model, each parsing the file's header anew) against
layerprobe's conversion load, which parses each file once (models/gguf._parsed_once). Same weights, compared.

    python bench/gguf_convert.py [--model gemma3|smollm2] [--repeats 2]

Prints each repeat's seconds and the ratio layerprobe / plain (lower is better), alternating the two so the
machine's load falls on both.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import transformers

from layerprobe.models import gguf


def load(path, once: bool):
    where, name = str(path.parent), path.name
    start = time.perf_counter()
    with gguf._parsed_once() if once else contextlib.nullcontext():
        transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    return time.perf_counter() - start, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gemma3", "smollm2"), default="gemma3")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    transformers.logging.disable_progress_bar()
    path = gguf.gemma3_file() if args.model == "gemma3" else gguf.smollm2_file()
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeats):
        for once in (False, True):
            seconds, model = load(path, once)
            times[once].append(seconds)
            state = {k: v.clone() for k, v in model.state_dict().items()}
            if once:
                same = all(torch.equal(state[k], reference[k]) for k in reference)
                print(f"  weights identical to the plain load: {same}")
            else:
                reference = state
            print(f"{'layerprobe' if once else 'plain':>10}: {seconds:6.1f} s", flush=True)
    plain, ours = statistics.median(times[False]), statistics.median(times[True])
    print(f"{args.model}: plain {plain:.1f} s, layerprobe {ours:.1f} s, ratio {ours / plain:.2f} (median of "
          f"{args.repeats})")


if __name__ == "__main__":
    main()
