"""The Trainer example of docs/monitor.md, with its sizes as options: trains an in-house model from scratch on the
builtin corpus with LayerprobeCallback and writes the monitor run folder (monitor.csv, monitor.png, summary.json).

    python reports/examples/monitor_trainer.py --placement pre --seq-len 128 --batch-size 4 --out reports/examples/monitor-pre-71m
    python reports/examples/monitor_trainer.py --placement mix --seq-len 128 --batch-size 4 --out reports/examples/monitor-mix-71m
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from layerprobe.data.corpora import open_corpus  # noqa: E402
from layerprobe.data.packing import batches  # noqa: E402
from layerprobe.integrations import LayerprobeCallback  # noqa: E402
from layerprobe.models.inhouse import build, make_config  # noqa: E402
from layerprobe.models.load import embedded_model_dir  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--size", default="llama-71m")
parser.add_argument("--placement", default="pre")
parser.add_argument("--layers", type=int, default=None, help="override the size's block count")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--seq-len", type=int, default=256)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--every", type=int, default=25)
parser.add_argument("--out", required=True)
opts = parser.parse_args()
extra = {"num_hidden_layers": opts.layers} if opts.layers else {}

torch.manual_seed(0)
tok = transformers.AutoTokenizer.from_pretrained(embedded_model_dir())
model = build(make_config(opts.size, opts.placement, vocab_size=len(tok), **extra))
texts = open_corpus("builtin").texts()  # the probe reads its first 4,096 tokens: training starts after them
data = [{"input_ids": b.input_ids[0], "labels": b.input_ids[0]} for b in batches(texts, tok, opts.seq_len, 1, 10**9)
        if b.input_ids.shape[1] == opts.seq_len][4096 // opts.seq_len + 1:]
args = transformers.TrainingArguments("/tmp/monitor-example", max_steps=opts.steps, per_device_train_batch_size=opts.batch_size,
                                      learning_rate=1e-3, warmup_steps=opts.steps // 10, report_to="none", save_strategy="no",
                                      logging_steps=opts.every, use_cpu=True, seed=0)
trainer = transformers.Trainer(model=model, args=args, train_dataset=data, processing_class=tok)
LayerprobeCallback(every=opts.every, out=opts.out, overwrite=True).attach(trainer)
trainer.train()
