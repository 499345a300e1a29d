"""Typed errors: each carries one sentence naming the problem and the fix; the CLI prints it and exits 2."""


class LayerprobeError(Exception):
    """Base class: a user-facing problem with a one-line message."""


class ModelLoadError(LayerprobeError):
    """The model or tokenizer could not be found or loaded."""


class ArchitectureError(LayerprobeError):
    """The stack of transformer blocks could not be located or changed."""


class DatasetError(LayerprobeError):
    """The probe corpus is missing, empty or malformed."""


class HubDatasetUnavailable(DatasetError):
    """A hub dataset (c4 by default) cannot be reached: the CLI adds the command line that runs offline."""


class ConfigError(LayerprobeError):
    """An option or project-config value is impossible."""


class TaskError(LayerprobeError):
    """An evaluation task is unknown or does not fit the model."""


class RunError(LayerprobeError):
    """A run folder is missing, incomplete or inconsistent."""


class NumericsError(LayerprobeError):
    """A measured number came out NaN or infinite (an overflowing dtype, a broken checkpoint). `what`: the number
    alone, without the fix, for a caller that knows the cause better (a training step that diverged)."""

    def __init__(self, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.what = what or message


def article(word: str) -> str:
    """'an' before a vowel (an angular run, an unknown run), else 'a' (a prune run): for messages that name a kind."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when empty): what a one-line error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def all_checks(*checks):
    """Run every cheap check, even after one fails, and report every problem at once: one failure is raised as
    it is; several become one line, '2 problems: (1) ... (2) ...', of the first one's type. Returns the results."""
    results, problems = [], []
    for check in checks:
        try:
            results.append(check())
        except LayerprobeError as exc:
            problems.append(exc)
            results.append(None)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        listed = " ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        error = type(problems[0])(f"{len(problems)} problems: {listed}")
        error.problems = problems
        raise error from None
    return results


def check_path(value, what: str) -> None:
    """A path the library was given (a run folder, an --out): a non-empty str or os.PathLike, else one line naming
    `what` (never a TypeError from deep inside pathlib, nor an empty --out silently taken as the default)."""
    import os

    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{what} must be a path (a str or pathlib.Path), got {type(value).__name__} "
                          f"{repr(value)[:40]}: pass a path.")
    if not str(os.fspath(value)).strip():
        raise ConfigError(f"{what} is an empty path: pass a path (or leave it out for the default).")


def numerics_fix(dtype: str | None) -> str:
    """The fix for a NaN or infinite number at `dtype`: a wider dtype, unless the run is float32 already, where it
    is the checkpoint (or its input) that is broken."""
    if str(dtype).replace("torch.", "") in ("float32", "float64"):
        return ("this is float32 already, so the checkpoint's weights (or the text) produce it: check the checkpoint "
                "(e.g. load it with transformers and run one forward)")
    return "the activations overflow this dtype; run with --dtype float32"
