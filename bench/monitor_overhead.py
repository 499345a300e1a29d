"""Training time with LayerprobeCallback at every=50 and every=500 against the same Trainer without it, in one run:
prints the ratios.

    python bench/monitor_overhead.py [--arch tiny] [--steps 500] [--seq-len 128] [--batch-size 4] [--repeats 2]

An in-house Pre-LN model (default `tiny`) trains --steps AdamW steps on the builtin corpus; the callback measures
its default probe set (4,096 tokens of the builtin corpus, 16 x 256) at each recorded step and writes a run folder
(in a temporary directory). Runs are interleaved (plain, every=50, every=500, then again) and the median taken,
since these machines are shared; the load average before and after is printed with the ratios. Each monitored run
also adds up the seconds spent inside the callback's hooks and prints the same-run ratio total / (total - those
seconds), which a shared machine's load shifts far less than the ratio of two runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402

from layerprobe.data.corpora import open_corpus  # noqa: E402
from layerprobe.data.packing import batches  # noqa: E402
from layerprobe.integrations import LayerprobeCallback  # noqa: E402
from layerprobe.models.inhouse import build, make_config  # noqa: E402
from layerprobe.models.load import embedded_model_dir, resolve_device  # noqa: E402


class TimedCallback(LayerprobeCallback):
    """The callback, with the wall seconds spent inside its hooks added up: the same run's own account of its cost,
    which a shared machine's load shifts far less than it shifts two separate runs."""

    seconds = 0.0

    def _timed(self, hook, *args, **kwargs):
        start = time.perf_counter()
        try:
            return hook(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def on_train_begin(self, *args, **kwargs):
        return self._timed(super().on_train_begin, *args, **kwargs)

    def on_pre_optimizer_step(self, *args, **kwargs):
        return self._timed(super().on_pre_optimizer_step, *args, **kwargs)

    def on_step_end(self, *args, **kwargs):
        return self._timed(super().on_step_end, *args, **kwargs)

    def on_train_end(self, *args, **kwargs):
        return self._timed(super().on_train_end, *args, **kwargs)


def train_seconds(opts, tok, data, device: str, every: int | None, out: str) -> tuple[float, float]:
    """(wall seconds of trainer.train(), seconds inside the callback) for a fresh seed-0 model, with the callback at
    `every` (None: without)."""
    torch.manual_seed(0)
    model = build(make_config(opts.arch, "pre", vocab_size=len(tok), max_position_embeddings=max(1024, opts.seq_len)),
                  device)
    args = transformers.TrainingArguments(
        output_dir=out, max_steps=opts.steps, per_device_train_batch_size=opts.batch_size, learning_rate=1e-3,
        logging_steps=50, save_strategy="no", report_to=[], seed=0, use_cpu=device == "cpu",
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, processing_class=tok)
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # no log lines on stdout, in every run
    callback = None
    if every is not None:
        callback = TimedCallback(every=every, out=os.path.join(out, f"monitor-{every}"), overwrite=True).attach(trainer)
    start = time.perf_counter()
    trainer.train()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, callback.seconds if callback is not None else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="tiny")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="auto")
    opts = parser.parse_args()
    device = resolve_device(opts.device)
    tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    data = [{"input_ids": b.input_ids[0], "labels": b.input_ids[0]}
            for b in batches(open_corpus("builtin").texts(), tok, opts.seq_len, 1, 10**9)
            if b.input_ids.shape[1] == opts.seq_len]
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {"plain": [], "every=50": [], "every=500": []}
    inside: dict[str, list[float]] = {name: [] for name in times}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(opts.repeats):
            for name, every in (("plain", None), ("every=50", 50), ("every=500", 500)):
                seconds, spent = train_seconds(opts, tok, data, device, every, out)
                times[name].append(seconds)
                inside[name].append(spent)
    base = statistics.median(times["plain"])
    print(f"{opts.arch} pre, {opts.steps} steps of {opts.batch_size} x {opts.seq_len} on {device}, "
          f"{opts.repeats} interleaved repeats (median); load average {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs")
    print(f"  plain      {base:8.2f} s")
    for name in ("every=50", "every=500"):
        seconds, spent = statistics.median(times[name]), statistics.median(inside[name])
        print(f"  {name:<10} {seconds:8.2f} s   ratio {seconds / base:.3f}   in the callback {spent:.2f} s: "
              f"same-run ratio {seconds / (seconds - spent):.3f}")


if __name__ == "__main__":
    main()
