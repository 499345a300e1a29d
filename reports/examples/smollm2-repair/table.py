"""The comparison table (Markdown) from the committed run folders k<k>-<method>/ and arc_easy.jsonl (eval_arc.py's
lines), printed to stdout: held-out ppl and kl of the unpruned, removed (none) and repaired models, each repair's
own seconds and the run's wall seconds, and arc_easy accuracy where it was scored."""

import json
import sys
from pathlib import Path

here = Path(__file__).parent
arc = {}
if (here / "arc_easy.jsonl").is_file():
    for line in (here / "arc_easy.jsonl").read_text().splitlines():
        row = json.loads(line)
        arc[Path(row["model"]).parent.name] = row["acc"]
none_arc = {4: 0.49, 6: 0.51, 8: 0.29}  # reports/examples/smollm2-curve-arc_easy (same 100 questions, same sets)
print("| k | removed | repair | held-out ppl | held-out kl | repair s | run s (wall) | arc_easy (100) |")
print("|---|---|---|---|---|---|---|---|")
for k in (4, 6, 8):
    rows = sorted(here.glob(f"k{k}-*/summary.json"))
    if not rows:
        continue
    first = json.loads(rows[0].read_text())
    print(f"| {k} | {first['removed']} | none | {first['heldout_before']['ppl']:.2f} | "
          f"{first['heldout_before']['kl']:.3f} | - | - | {none_arc[k]:.2f} |")
    for path in rows:
        s = json.loads(path.read_text())
        how = s["method"] + (f" ({s['steps']} steps)" if s["method"] in ("lora", "tail") else "")
        acc = arc.get(path.parent.name)
        print(f"| {k} | {s['removed']} | {how} | {s['heldout_after']['ppl']:.2f} | {s['heldout_after']['kl']:.3f} | "
              f"{s['repair_seconds']:.0f} | {s['seconds']:.0f} | {'' if acc is None else f'{acc:.2f}'} |")
print(f"\nunpruned: held-out ppl {first['heldout_unpruned_ppl']:.2f}, arc_easy 0.48", file=sys.stdout)
