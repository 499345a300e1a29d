"""Data-parallel angular: tokens per second with 1 process and with N processes (torchrun), in one run.

    python bench/angular_scaling.py [--model minilm] [--tokens 32768] [--procs 2]

Both runs use the same total number of threads (the single process gets all of them, each rank 1/N), the same
tokens and batches, and their angular.csv must agree; the ratio is the speed-up of the distributed path. On a
GPU machine pass --device cuda and --procs = number of GPUs (one rank per GPU).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def run(args: list[str], procs: int, threads: int, cwd: str) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    if procs == 1:
        cmd = [sys.executable, "-m", "layerprobe", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
               "-m", "layerprobe", *args]
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        common = ["angular", args.model, "--dataset", "builtin", "--tokens", str(args.tokens), "--seq-len",
                  str(args.seq_len), "--batch-size", str(args.batch_size), "--device", args.device]
        one = run(common + ["--out", f"{tmp}/one"], 1, threads, tmp)
        many = run(common + ["--out", f"{tmp}/many"], args.procs, max(1, threads // args.procs), tmp)
        a = pd.read_csv(Path(tmp) / "one" / "angular.csv")["distance"]
        b = pd.read_csv(Path(tmp) / "many" / "angular.csv")["distance"]
        same = bool(((a - b).abs() < 1e-9).all())
    print(f"{args.model}, {args.tokens} tokens, {threads} threads in all (wall time incl. start-up and model load)")
    print(f"1 process: {one:.1f} s ({args.tokens / one:,.0f} tokens/s); {args.procs} processes: {many:.1f} s "
          f"({args.tokens / many:,.0f} tokens/s); speed-up {one / many:.2f}x; same angular.csv: {same}")


if __name__ == "__main__":
    main()
