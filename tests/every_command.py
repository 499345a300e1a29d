"""A tiny run of every command that writes a run folder (the tiny LLaMA of conftest), and a user's folder to plant:
shared by the tests that enumerate commands (ownership, non-finite results, token counts, records read as input)."""

from __future__ import annotations

from pathlib import Path

TINY = ["--dataset", "builtin", "--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"]
RUNS = {  # command -> a tiny run of it, without --out ({model}: the tiny LLaMA)
    "angular": ["angular", "{model}", *TINY, "--lens-tokens", "0"],
    "prune": ["prune", "{model}", "--task", "kl", *TINY],
    "curve": ["prune", "{model}", "--task", "kl", "--curve", "--strategies", "last", "--max-removed", "1", *TINY],
    "heal": ["heal", "{model}", "--remove", "1", "--steps", "1", "--no-gain", "--dtype", "float32", *TINY],
    "gradnorm": ["gradnorm", "--arch", "tiny", "--seeds", "1", "--batches", "1", "--norm", "pre", "--dataset",
                 "builtin", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"],
    "toy": ["toy", "--depth", "3", "--width", "8", "--samples", "16"],
    "export": ["export", "{model}", "--remove", "1", "--device", "cpu", "--dtype", "float32"],
}
RESUMABLE = ("angular", "prune", "curve", "heal", "gradnorm")
FOREIGN = {"summary.json": '{"mine": true}\n', "prune.csv": "a,b\n1,2\n", "monitor.csv": "step\n1\n",
           "merged/mine.bin": "weights"}


def run_args(command: str, model_dirs, out, *extra) -> list:
    return [a.format(model=model_dirs["llama"]) for a in RUNS[command]] + ["--out", str(out), *extra]


def listing(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    for name, text in FOREIGN.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder
