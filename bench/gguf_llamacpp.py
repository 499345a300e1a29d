"""llama.cpp (llama-cpp-python) on an exported GGUF: its next-token logits against transformers' on the HF export of
the same removal, and its file size and prompt / decode tokens per second before and after the cut.

    python bench/gguf_llamacpp.py SOURCE.gguf EXPORT_FOLDER [--original-hf FOLDER] [--json OUT.json]

EXPORT_FOLDER is what `layerprobe export ... --format hf,gguf` wrote (model.gguf beside the HF files). The prompts
are tokenized once with the export's tokenizer and the same ids go to both; the logits compared are those after
each prompt's last token. Timings: one llama.cpp context per model, one thread, the original and the pruned file
alternated, one run each (a 128-token prompt, then 32 tokens decoded one at a time, greedy).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return",
           "Water boils at a temperature of", "Once upon a time, in a small village, there lived a",
           "The three primary colours are red, blue and"]


def llamacpp(path: Path, n_ctx: int = 512):
    """A llama.cpp model on one CPU thread, quiet."""
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=n_ctx, n_threads=1, n_threads_batch=1, n_batch=512, verbose=False,
                 logits_all=False)


def last_logits(model) -> np.ndarray:
    """The logits after the last token evaluated (llama-cpp-python keeps `scores` only with logits_all)."""
    return np.ctypeslib.as_array(model._ctx.get_logits(), shape=(model.n_vocab(),)).astype(np.float64)


def llamacpp_next_logits(path: Path, prompts: list[list[int]]) -> np.ndarray:
    """(prompts, vocab): llama.cpp's logits after each prompt's last token."""
    model = llamacpp(path)
    rows = []
    for ids in prompts:
        model.reset()
        model.eval(ids)
        rows.append(last_logits(model))
    return np.stack(rows)


def transformers_next_logits(folder: Path, prompts: list[list[int]]) -> np.ndarray:
    """(prompts, vocab): transformers' float32 logits after each prompt's last token."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return np.stack([model(torch.tensor([ids])).logits[0, -1].double().numpy() for ids in prompts])


def token_ids(folder: Path) -> list[list[int]]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return [tokenizer(p).input_ids for p in PROMPTS]


def compare(gguf_path: Path, hf_folder: Path, prompts: list[list[int]]) -> dict:
    """llama.cpp on the GGUF against transformers on the HF folder: top-1 per prompt, max |logit difference|."""
    ours, theirs = llamacpp_next_logits(gguf_path, prompts), transformers_next_logits(hf_folder, prompts)
    vocab = min(ours.shape[1], theirs.shape[1])  # an HF head may pad the vocabulary
    ours, theirs = ours[:, :vocab], theirs[:, :vocab]
    return {"top1_llamacpp": ours.argmax(1).tolist(), "top1_transformers": theirs.argmax(1).tolist(),
            "top1_equal": bool((ours.argmax(1) == theirs.argmax(1)).all()),
            "max_abs_logit_difference": float(np.abs(ours - theirs).max()),
            "logit_range": float(theirs.max() - theirs.min())}


def speeds(path: Path, prompt_len: int = 128, new_tokens: int = 32) -> dict:
    """One run: prompt tokens/s over a `prompt_len`-token prompt, decode tokens/s over `new_tokens` greedy tokens."""
    model = llamacpp(path)
    ids = [(7 * i + 11) % 1000 + 100 for i in range(prompt_len)]  # ordinary vocabulary ids, the same for both models
    start = time.perf_counter()
    model.eval(ids)
    prompt = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(new_tokens):
        model.eval([int(np.argmax(last_logits(model)))])
    decode = time.perf_counter() - start
    return {"prompt_tokens_per_second": prompt_len / prompt, "decode_tokens_per_second": new_tokens / decode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="the original GGUF")
    parser.add_argument("export", type=Path, help="the export folder (model.gguf and the HF files)")
    parser.add_argument("--original-hf", type=Path, help="an HF folder of the original model: the same comparison "
                        "unpruned, as the baseline of the llama.cpp vs transformers difference")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    prompts = token_ids(args.export)
    result = {"prompts": PROMPTS, "pruned": compare(args.export / "model.gguf", args.export, prompts)}
    if args.original_hf:
        result["original"] = compare(args.source, args.original_hf, prompts)
    result["bytes"] = {"original": args.source.stat().st_size, "pruned": (args.export / "model.gguf").stat().st_size}
    runs = {}
    for name, path in (("original", args.source), ("pruned", args.export / "model.gguf")):  # alternated, one each
        runs[name] = speeds(path)
    result["llamacpp_speed"] = runs
    result["llamacpp_version"] = __import__("llama_cpp").__version__
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
