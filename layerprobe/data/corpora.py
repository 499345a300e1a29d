"""Where probe text comes from: C4, any hub dataset, local files, or Python's own English docs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from layerprobe.errors import DatasetError, HubDatasetUnavailable
from layerprobe.hub import hub_problem

BUILTIN_ALIASES = ("builtin", "pydoc")
C4 = ("allenai/c4", "en", "validation")
LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
_OFFLINE_FIX = (
    "pass --dataset builtin (English prose shipped with Python) or a local file "
    "(--dataset corpus.txt | .jsonl | .parquet | a save_to_disk folder)"
)


@dataclass
class Corpus:
    """A named stream of documents."""

    spec: str  # what the user typed
    kind: str  # "builtin", "txt", "jsonl", "parquet", "disk" or "hub"
    description: str  # e.g. "allenai/c4 (en, validation, streamed)"
    text_field: str = "text"
    hub: tuple[str, str | None, str] | None = None  # (name, config, split) for hub datasets

    def texts(self) -> Iterator[str]:
        """Yield non-empty documents in a fixed order."""
        for text in _READERS[self.kind](self):
            if text and text.strip():
                yield text


def open_corpus(spec: str = "c4", text_field: str = "text") -> Corpus:
    """Resolve --dataset into a Corpus, checking local files before any hub call."""
    if spec.lower() in BUILTIN_ALIASES:
        return Corpus(spec, "builtin", "Python's built-in documentation (pydoc_data.topics)", text_field)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
            raise DatasetError(f"Folder '{spec}' is not a datasets save_to_disk folder: pass a .txt, .jsonl or .parquet file.")
        return Corpus(spec, "disk", f"{spec} (save_to_disk folder)", text_field)
    if path.suffix.lower() in LOCAL_SUFFIXES or path.exists() or spec.startswith((".", "/", "~")):
        if not path.is_file():
            raise DatasetError(f"Dataset file '{spec}' does not exist: check the path, or use --dataset builtin.")
        kind = path.suffix.lower().lstrip(".")
        if kind not in ("txt", "jsonl", "parquet"):
            raise DatasetError(f"Unsupported dataset file '{spec}': use .txt, .jsonl (field 'text') or .parquet.")
        return Corpus(spec, kind, f"{spec} ({kind})", text_field)
    if spec.lower() == "c4":
        name, config, split = C4
    else:
        parts = spec.split(":")
        if len(parts) > 3 or not parts[0]:
            raise DatasetError(f"Bad dataset '{spec}': use a hub id as name[:config][:split], or a local file.")
        name, config, split = (parts + [None, None])[:3]
        split = split or "train"
    _check_name(spec, name)
    problem = hub_problem()  # seconds, where the hub libraries would retry for half a minute
    if problem is not None:
        raise HubDatasetUnavailable(f"Dataset '{spec}' streams from the Hugging Face hub and {problem}: {_OFFLINE_FIX}.")
    described = f"{name} ({', '.join(p for p in (config, split) if p)}, streamed)"
    return Corpus(spec, "hub", described, text_field, hub=(name, config, split))


def _check_name(spec: str, name: str) -> None:
    """A one-word name one typo away from a local corpus name is that typo, not a hub dataset (hub datasets are
    named owner/name; the few legacy one-word ones are not this close to 'builtin')."""
    import difflib

    if "/" in name:
        return
    close = difflib.get_close_matches(name.lower(), (*BUILTIN_ALIASES, "c4"), n=1, cutoff=0.7)
    if close and close[0] != "c4":
        raise DatasetError(f"Unknown dataset '{spec}'. Did you mean: {close[0]}? (A hub dataset is named "
                           "owner/name[:config][:split].)")


def _read_builtin(corpus: Corpus) -> Iterator[str]:
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield topics[key]


def _read_txt(corpus: Corpus) -> Iterator[str]:
    """Documents are separated by blank lines."""
    try:
        text = Path(corpus.spec).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"'{corpus.spec}' is not UTF-8 text: convert it to UTF-8.") from None
    yield from (block.strip() for block in text.split("\n\n"))


def _field(record: object, corpus: Corpus, where: str) -> str:
    if not isinstance(record, dict) or corpus.text_field not in record:
        fields = ", ".join(record) if isinstance(record, dict) else type(record).__name__
        raise DatasetError(
            f"{where} has no field '{corpus.text_field}' (has: {fields}): pass --text-field NAME."
        )
    value = record[corpus.text_field]
    if not isinstance(value, str):
        raise DatasetError(f"{where}: field '{corpus.text_field}' is {type(value).__name__}, not text: pick a text field.")
    return value


def _read_jsonl(corpus: Corpus) -> Iterator[str]:
    with open(Path(corpus.spec).expanduser(), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"'{corpus.spec}' line {number} is not valid JSON ({exc.msg}): one JSON object per line."
                ) from None
            yield _field(record, corpus, f"'{corpus.spec}' line {number}")


def _read_parquet(corpus: Corpus) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(Path(corpus.spec).expanduser())
    except Exception as exc:  # pyarrow raises several unrelated types for a damaged file
        raise DatasetError(f"Could not read parquet file '{corpus.spec}': {exc}.") from None
    if corpus.text_field not in table.column_names:
        raise DatasetError(
            f"'{corpus.spec}' has no column '{corpus.text_field}' (has: {', '.join(table.column_names)}): "
            "pass --text-field NAME."
        )
    for value in table.column(corpus.text_field).to_pylist():
        if isinstance(value, str):
            yield value


def _read_disk(corpus: Corpus) -> Iterator[str]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(Path(corpus.spec).expanduser()))
    except Exception as exc:  # datasets wraps IO/format problems in several types
        raise DatasetError(f"Could not load the save_to_disk folder '{corpus.spec}': {exc}.") from None
    if isinstance(loaded, datasets.DatasetDict):
        split = next((s for s in ("validation", "test", "train") if s in loaded), next(iter(loaded)))
        loaded = loaded[split]
    if corpus.text_field not in loaded.column_names:
        raise DatasetError(
            f"'{corpus.spec}' has no column '{corpus.text_field}' (has: {', '.join(loaded.column_names)}): "
            "pass --text-field NAME."
        )
    for record in loaded:
        yield record[corpus.text_field]


def _read_hub(corpus: Corpus) -> Iterator[str]:
    import datasets

    name, config, split = corpus.hub
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
        iterator = iter(stream)
        first = next(iterator, None)
    except Exception as exc:  # network, auth and missing-config errors all land here
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HubDatasetUnavailable(f"Could not stream dataset '{corpus.spec}' from the hub ({first_line}): {_OFFLINE_FIX}.") from None
    if first is None:
        return
    yield _field(first, corpus, f"Dataset '{corpus.spec}'")
    for record in iterator:
        yield _field(record, corpus, f"Dataset '{corpus.spec}'")


_READERS = {
    "builtin": _read_builtin,
    "txt": _read_txt,
    "jsonl": _read_jsonl,
    "parquet": _read_parquet,
    "disk": _read_disk,
    "hub": _read_hub,
}
