"""A loaded checkpoint's identity, cheap to compute: what a run records as `weights` and what export, heal and
--allow-other-weights compare (a GGUF file is identified by its sha256 instead: models/gguf.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

FINGERPRINT_BYTES = 1 << 20  # per weight file: head and tail are hashed, plus names and sizes


def weights_fingerprint(folder: Path) -> str:
    """sha256 over each weight file's name, size, first and last MiB: cheap, and changes when weights do."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".json") and p.is_file())
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with open(path, "rb") as handle:
            digest.update(handle.read(FINGERPRINT_BYTES))
            if size > 2 * FINGERPRINT_BYTES:
                handle.seek(size - FINGERPRINT_BYTES)
                digest.update(handle.read(FINGERPRINT_BYTES))
    return "sha256-head-tail:" + digest.hexdigest()
