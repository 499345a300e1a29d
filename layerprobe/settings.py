"""How a setting declares itself, once: each field of a settings dataclass (config.py) is a `setting(...)` whose
Mark carries its help, its flag, its allowed values or range, whether it changes the numbers, and whether
[tool.layerprobe] and the environment may set it. Everything else reads the marks:

- `resolve(cls, given, project)`: CLI > environment (LAYERPROBE_<NAME>) > [tool.layerprobe] > default, then
  `validate`, whose errors say where a bad value came from;
- `identity(config)`: the settings a --resume must match and `merge` compares, derived, never listed;
- cli/options.py builds every command's Typer options from the same marks, and docs/cli.md is `--help`.

A new setting is one `setting(...)` line: its option, its precedence, its check and its place in the run's identity
follow from it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, Callable

from layerprobe.errors import ConfigError


@dataclass(frozen=True)
class Mark:
    """What a settings field says about itself."""

    help: str  # one sentence for --help, docs/cli.md and the dataclass reader
    numbers: bool = True  # changes a number in the outputs: part of the run's identity (--resume, merge)
    flag: str | None = None  # CLI flag; default '--' + the field name with dashes; '' = no CLI option
    aliases: tuple[str, ...] = ()  # old flag names, hidden, kept for existing scripts
    negative: bool = False  # a --x/--no-x pair for a bool
    choices: tuple[str, ...] | None = None  # allowed values (each value, for a tuple field)
    minimum: float | None = None  # inclusive bounds
    maximum: float | None = None
    above: float | None = None  # exclusive lower bound
    whole_from: float | None = None  # a value at or above this must be a whole number (--limit: below 1 a fraction of
    # the documents, from 1 a count of them, as lm-eval reads it)
    project: bool = False  # settable from [tool.layerprobe] (by the field's name) and LAYERPROBE_<NAME>
    parse: str | None = None  # how CLI text becomes the value: 'csv' (tuple of str), 'floats', 'size' (bytes)
    before: Any = None  # (value,): what runs saved before the setting existed did (their identity), if not the default
    where: bool = False  # names where an input is read (a path, a hub id), not how it is measured: compare never
    # reports it as a changed setting
    given_of: str | None = None  # a bool resolve sets: whether the sibling field of this name was given (CLI,
    # environment or project file) rather than left at its default
    resolved: str | None = None  # what the setting came to on the machine is the identity key resolved.<name> (the
    # dtype auto picked, a capped seq_len, the weights behind a name): the command supplies it (resolved_identity)
    ranges: bool = False  # block ids as text ('2,3', '2-3', '3,2'): the identity holds them in one spelling
    applies: tuple | None = None  # (setting path from the config's root, values it applies with): given while that
    # setting is none of them, it would do nothing, and is refused naming both (check_applies); ('x', 'not', values):
    # applies unless x is one of them; ('x', 'nonzero'): only where x is given, not 0 or None; ('x', 'has', value):
    # only where the list x holds value (--format ... gguf, --norm ... mix), or one of values, a collection such as a
    # registry's Names (--strategies ... any strategy whose record rescores); ('any', rule, rule, ...): where any of
    # the rules holds (prune's --tokens: a task-free --task, or --curve); ('x', 'unset', 'NAME'): only where x is not
    # given (gradnorm's in-house --arch: idle with a checkpoint MODEL), NAME what the message calls x
    recorded: str | None = None  # the summary key holding what the setting came to in the run (the seq_len used
    # after the model's cap, the lens positions measured): compare names that, not what was asked
    inner: tuple = ()  # a group's field: ((name of a field of the group, its applies rule), ...), how this command
    # uses the shared group (DataOptions' --tokens does nothing in prune --task mmlu, everything in angular)


def setting(default: Any = MISSING, *, factory: Callable[[], Any] | Any = MISSING, **mark: Any) -> Any:
    """A dataclass field with its Mark (see Mark for the keywords)."""
    return field(default=default, default_factory=factory, metadata={"mark": Mark(**mark)})


def mark_of(f: dataclasses.Field) -> Mark | None:
    return f.metadata.get("mark")


def flag_of(f: dataclasses.Field) -> str:
    mark = mark_of(f)
    if mark is not None and mark.flag is not None:
        return mark.flag
    return "--" + f.name.replace("_", "-")


@functools.lru_cache(maxsize=None)
def type_hints(cls: type) -> dict[str, Any]:
    """typing.get_type_hints(cls), once per class: it evaluates every annotation string on each call (a CLI command
    resolving its settings asked it thousands of times)."""
    return typing.get_type_hints(cls)


def group_of(cls: type, name: str) -> type | None:
    """The settings dataclass a field of `cls` holds (ModelOptions for `model`), or None for a plain value."""
    hint = type_hints(cls)[name]
    for candidate in (hint, *typing.get_args(hint)):
        if is_dataclass(candidate):
            return candidate
    return None


def walk(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, type]]:
    """(dotted path, field, owning class) of every plain field of cls and its nested groups, in declaration order."""
    found = []
    for f in fields(cls):
        found.append((prefix + f.name, f, cls))
        group = group_of(cls, f.name)
        if group is not None:
            found.extend(walk(group, f"{prefix}{f.name}."))
    return found


# ---- run identity ------------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """As the value reads back from JSON (tuples become lists), so a saved identity compares exactly."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def identity(config: Any, saved: Mapping | None = None, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """{dotted name: value} of every setting marked as changing the numbers, from a settings object or from its
    dict as a manifest saved it (`saved`, read with the marks of type `config`). A nested group left None (no
    --curve, gradnorm without a checkpoint) is one key with the value None."""
    cls = config if isinstance(config, type) else type(config)
    values = dataclasses.asdict(config) if saved is None else dict(saved)
    return {k: v for k, v in _identity(cls, values, "").items() if k not in skip}


def _identity(cls: type, values: Mapping, prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for f in fields(cls):
        mark = mark_of(f)
        if mark is None or not mark.numbers:
            continue
        value = values.get(f.name, mark.before[0] if mark.before else f.default if f.default is not MISSING else None)
        group = group_of(cls, f.name)
        if group is not None and isinstance(value, Mapping):
            found |= _identity(group, value, f"{prefix}{f.name}.")
        else:
            found[prefix + f.name] = _canonical_ranges(value) if mark.ranges else _plain(value)
    return found


def _canonical_ranges(text: Any) -> Any:
    """'3,2' and '2,3' -> '2-3': one spelling of a set of block ids, so --resume with --remove 2,3 after 2-3 is the
    same setting. Text that is no list of ids and ranges stays as it is (its command names the problem)."""
    if not isinstance(text, str):
        return text
    ids: set[int] = set()
    for token in text.replace(" ", "").split(","):
        low, _, high = token.partition("-")
        if not low.isdigit() or not (high.isdigit() or not high):
            return text
        ids.update(range(int(low), int(high or low) + 1))
    runs: list[list[int]] = []
    for index in sorted(ids):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


RESOLVED = "resolved."  # the prefix of the identity keys a setting's Mark.resolved names


def resolved_identity(config: Any, came_to: Mapping[str, Any]) -> dict[str, Any]:
    """{resolved.<name>: value} for every setting of `config` whose Mark names a resolved key (a group left None, such
    as prune's curve, has none), from what the command found the settings came to (`came_to`, by those names). A
    name declared and not supplied, or supplied and not declared, is a bug: the keys come from the marks alone."""
    names = _resolved_names(config)
    if set(names) != set(came_to):
        raise RuntimeError(f"resolved identity of {type(config).__name__}: declared {sorted(names)}, supplied "
                           f"{sorted(came_to)}")
    return {RESOLVED + name: came_to[name] for name in names}


def _resolved_names(config: Any) -> list[str]:
    found = []
    for f in fields(config):
        mark, value = mark_of(f), getattr(config, f.name)
        if is_dataclass(value):
            found += _resolved_names(value)
        elif mark is not None and mark.resolved is not None and group_of(type(config), f.name) is None:
            found.append(mark.resolved)
    return found


def where_paths(cls: type) -> tuple[str, ...]:
    """The dotted names of the settings that say where an input is read (Mark.where), not how it is measured."""
    return tuple(path for path, f, _ in walk(cls) if mark_of(f) is not None and mark_of(f).where)


# ---- resolve: CLI > environment > project > default -------------------------------------------------------------


def env_name(name: str) -> str:
    return "LAYERPROBE_" + name.upper()


def project_keys(*classes: type) -> dict[str, type]:
    """[tool.layerprobe] keys the settings allow, by name, with the plain type a value must have."""
    keys: dict[str, type] = {}
    for cls in classes:
        for _, f, owner in walk(cls):
            mark = mark_of(f)
            if mark is not None and mark.project:
                keys[f.name] = _base_type(owner, f.name)
    return keys


def _base_type(cls: type, name: str) -> type:
    hint = type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return tuple
    return args[0] if args and typing.get_origin(hint) is not tuple else hint


def parse_text(cls: type, f: dataclasses.Field, text: str, where: str) -> Any:
    """A value written as text (an environment variable, a CLI list) as the field's type; a bad one is one line."""
    mark = mark_of(f)
    kind = _base_type(cls, f.name)
    try:
        if mark is not None and mark.parse == "size":
            return parse_size(text)
        if mark is not None and mark.parse == "floats":
            return tuple(float(v) for v in text.split(",") if v.strip())
        if kind is tuple or (mark is not None and mark.parse == "csv"):
            return tuple(v.strip() for v in text.split(",") if v.strip())
        if kind is bool:
            if text.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("1", "true", "yes")
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        return text
    except ValueError:
        raise ConfigError(f"{where} '{text}' is not a valid {_describe_kind(kind, mark)}: {_fix(f)}.") from None


def _describe_kind(kind: type, mark: Mark | None) -> str:
    if mark is not None and mark.parse == "size":
        return "size (e.g. 8GiB, 500MB or a number of bytes)"
    if mark is not None and mark.parse == "floats":
        return "list of numbers (e.g. 0.5,1,2)"
    return {int: "whole number", float: "number", bool: "true/false"}.get(kind, "value")


def parse_size(text: str) -> int:
    """'8GiB', '500MB', '2g' or a plain number of bytes -> bytes."""
    import re

    units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
             "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in units or float(match.group(1)) <= 0:
        raise ValueError(text)
    return int(float(match.group(1)) * units[match.group(2).lower()])


def resolve(cls: type, given: Mapping, project: Mapping | None = None, base: Any = None,
            environ: Mapping[str, str] | None = None, project_file: Any = None) -> tuple[Any, dict[str, str]]:
    """Build `cls` from what the user gave: per field, the CLI value (`given`, nested by group; None = not given),
    else LAYERPROBE_<NAME>, else [tool.layerprobe], else `base`'s value (the dataclass default). Returns the validated
    settings and {dotted name: where its value came from} for every value not taken from the default."""
    if not (isinstance(cls, type) and is_dataclass(cls)):
        raise ConfigError(f"resolve takes a settings class such as AngularConfig, got {type(cls).__name__} "
                          f"{repr(cls)[:40]}: pass one.")
    if not isinstance(given, Mapping):
        raise ConfigError(f"resolve takes the given values as a dict, got {type(given).__name__}: pass a dict.")
    environ = os.environ if environ is None else environ
    sources: dict[str, str] = {}
    where = f"[tool.layerprobe] in {project_file}" if project_file else "[tool.layerprobe]"
    _known_keys(cls, given, "")
    config = _resolve(cls, given, project or {}, base if base is not None else cls(), environ, where, "", sources)
    _given(config, cls(), "", {})  # every field of its declared type ('many' tokens is an error here, not later)
    validate(config, sources)
    check_applies(config, sources)
    return config, sources


def unknown_saved(cls: type, saved: Mapping, prefix: str = "") -> list[str]:
    """The dotted names in a manifest's settings that no field of `cls` (or of its groups) has: written by a newer
    layerprobe, or by hand."""
    names = {f.name: f for f in fields(cls) if f.init}
    found = [f"{prefix}{key}" for key in saved if key not in names]
    for key, value in saved.items():
        group = group_of(cls, key) if key in names else None
        if group is not None and isinstance(value, Mapping):
            found += unknown_saved(group, value, f"{prefix}{key}.")
    return found


def from_saved(cls: type, saved: Mapping, where: str, **given: Any) -> Any:
    """The settings object a manifest saved (`where`: its file, for the message), `given` replacing some: a setting
    this version does not know is one line naming it, never a TypeError."""
    unknown = unknown_saved(cls, saved)
    if unknown:
        from layerprobe.errors import RunError

        raise RunError(f"'{where}' holds setting{'s' if len(unknown) > 1 else ''} this layerprobe version does not "
                       f"know ({', '.join(unknown[:5])}): it was written by a newer layerprobe (or edited); use that "
                       "version, or upgrade.")
    values = dict(saved)
    for f in fields(cls):
        group = group_of(cls, f.name)
        if group is not None and isinstance(values.get(f.name), Mapping) and f.name not in given:
            values[f.name] = from_saved(group, values[f.name], where)
    return cls(**{**values, **given})


def _known_keys(cls: type, given: Mapping, prefix: str) -> None:
    """A given key that is no field of `cls` (a misspelling, or a grouped setting given at the top level) is an
    error naming it, never silently ignored."""
    names = [f.name for f in fields(cls) if f.init]
    for key, value in given.items():
        if key not in names:
            if value is None:
                continue
            inner = {f"{name}.{f.name}": f.name for name in names if group_of(cls, name) is not None
                     for f in fields(group_of(cls, name))}
            groups = [path for path, field in inner.items() if field == key]
            near = difflib.get_close_matches(str(key), list(inner.values()), n=1)
            close = groups or [path for path in inner if inner[path] in near][:1] \
                or difflib.get_close_matches(str(key), names, n=1)
            hint = f" Did you mean: {prefix}{close[0]}?" if close else ""
            raise ConfigError(f"{cls.__name__} has no setting '{prefix}{key}'.{hint}")
        group = group_of(cls, key)
        if group is not None and isinstance(value, Mapping):
            _known_keys(group, value, f"{prefix}{key}.")


def _resolve(cls: type, given: Mapping, project: Mapping, base: Any, environ: Mapping[str, str], where: str,
             prefix: str, sources: dict[str, str]) -> Any:
    values = {}
    for f in fields(cls):
        if not f.init:
            continue
        path, mark, default = prefix + f.name, mark_of(f), getattr(base, f.name)
        group = group_of(cls, f.name)
        value = given.get(f.name)
        if group is not None and not is_dataclass(value):
            if isinstance(value, Mapping):
                inner = default if default is not None else group()
                values[f.name] = _resolve(group, value, project, inner, environ, where, path + ".", sources)
            else:
                values[f.name] = default
            continue
        if value is not None:
            sources[path] = f"the command line ({flag_of(f)})"
        elif mark is not None and mark.project and environ.get(env_name(f.name)):
            name = env_name(f.name)
            value = parse_text(cls, f, environ[name], f"Environment variable {name}")
            sources[path] = f"the environment ({name})"
        elif mark is not None and mark.project and f.name in project:
            value = project[f.name]
            value = tuple(value) if isinstance(value, list) else value
            sources[path] = where
        else:
            value = default
        values[f.name] = value
    for f in fields(cls):  # whether a sibling was given, where a field asks (DataOptions.seq_len_given)
        mark = mark_of(f)
        if mark is not None and mark.given_of is not None:
            values[f.name] = prefix + mark.given_of in sources
    return cls(**values)


# ---- validate ------------------------------------------------------------------------------------------------------


def _bounds(mark: Mark) -> str:
    """The allowed range in words: 'positive', '0 or more', 'within [0, 1]', 'at least 2'."""
    low = mark.minimum if mark.minimum is not None else mark.above
    if mark.maximum is not None and low is not None:
        return f"within {'(' if mark.above is not None else '['}{low:g}, {mark.maximum:g}]"
    if mark.above == 0 or mark.minimum == 1:
        return "positive"
    if mark.minimum == 0:
        return "0 or more"
    if mark.above is not None:
        return f"above {mark.above:g}"
    return f"at least {mark.minimum:g}" if mark.minimum is not None else f"at most {mark.maximum:g}"


def _fix(f: dataclasses.Field) -> str:
    mark = mark_of(f)
    if mark is not None and mark.choices:
        return "use " + ", ".join(mark.choices)
    if mark is not None and (mark.minimum, mark.maximum, mark.above) != (None, None, None):
        bounds = _bounds(mark)
        return {"positive": "pass a positive value", "0 or more": "pass 0 or more"}.get(bounds, f"pass a value {bounds}")
    return "fix the value"


def validate(config: Any, sources: Mapping[str, str] | None = None, prefix: str = "", every: bool = False) -> None:
    """Every value the user gave (those in `sources`, or all with `every`) within its Mark's choices and range; an
    error names the option, where the value came from (when not the command line) and the fix, with a
    did-you-mean for a misspelt name."""
    sources = sources or {}
    if not is_dataclass(config) or isinstance(config, type):
        raise ConfigError(f"validate takes a settings object such as AngularConfig(...), got {type(config).__name__} "
                          f"{repr(config)[:40]}: pass one.")
    for f in fields(config):
        value, mark, path = getattr(config, f.name), mark_of(f), prefix + f.name
        if is_dataclass(value):
            validate(value, sources, path + ".", every)
            continue
        if mark is None or value is None or not (every or path in sources):
            continue
        origin = sources.get(path, "")
        said = f" (from {origin})" if origin and not origin.startswith("the command line") else ""
        label = flag_of(f) if mark.flag != "" else f.name
        if isinstance(value, (tuple, list)) and len(set(value)) < len(value):
            twice = next(v for v in value if list(value).count(v) > 1)
            raise ConfigError(f"{label} lists '{twice}' twice{said}: list each once.")
        if mark.choices:
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if item not in mark.choices:
                    close = difflib.get_close_matches(str(item), mark.choices, n=1)
                    hint = f" Did you mean: {close[0]}?" if close else ""
                    raise ConfigError(f"Unknown {label} '{item}'{said}: use {', '.join(mark.choices)}.{hint}")
        if mark.flag == "--out" and isinstance(value, str) and not value.strip():
            raise ConfigError(f"--out is an empty path{said}: pass a folder (or leave --out out for the default).")
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            raise ConfigError(f"{label} must be a finite number, got {value:g}{said}.")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            low_ok = (mark.minimum is None or value >= mark.minimum) and (mark.above is None or value > mark.above)
            if not low_ok or (mark.maximum is not None and value > mark.maximum) or value != value:
                kind = "a positive number" if _bounds(mark) == "positive" and isinstance(value, float) else _bounds(mark)
                raise ConfigError(f"{label} must be {kind}, got {value:g}{said}.")
            if mark.whole_from is not None and value >= mark.whole_from and value != int(value):
                raise ConfigError(f"{label} {value:g}{said} is neither a fraction below {mark.whole_from:g} nor a whole "
                                  f"number: pass a whole count ({int(value)}) or a fraction below {mark.whole_from:g}.")


def _applies_now(config: Any, rule: tuple) -> tuple[bool, str, Any]:
    """(whether a setting with Mark.applies `rule` does something with `config`, the flag it depends on, its value);
    for ('any', ...), the first rule's flag and value."""
    if rule[0] == "any":
        found = [_applies_now(config, each) for each in rule[1:]]
        return any(applies for applies, _, _ in found), found[0][1], found[0][2]
    owner, name = config, rule[0]
    while "." in name and not hasattr(owner, name.split(".")[0]):  # a group resolved on its own (CurveSettings)
        name = name.split(".", 1)[1]
    for part in name.split(".")[:-1]:
        owner = getattr(owner, part, None)
    leaf = name.split(".")[-1]
    value = getattr(owner, leaf, None)
    f = next((f for f in fields(owner) if f.name == leaf), None) if is_dataclass(owner) else None
    flag = flag_of(f) if f is not None else f"--{leaf.replace('_', '-')}"
    if rule[1] == "unset":
        return value is None, rule[2], value
    if rule[1] == "nonzero":
        return bool(value), flag, value
    if rule[1] == "not":
        return value not in rule[2], flag, value
    if rule[1] == "has":  # a list setting (--format hf,gguf) that must hold the value, or one of the values
        return any(v in held_by(rule) for v in value or ()), flag, ",".join(map(str, value or ()))
    return value in rule[1], flag, value


def held_by(rule: tuple) -> tuple:
    """The values a ('x', 'has', value or values) rule wants the list x to hold one of, read now (a Names collection
    holds a record registered later)."""
    return (rule[2],) if isinstance(rule[2], str) else tuple(rule[2])


def _wanted(config: Any, rule: tuple) -> str:
    """Where a setting with Mark.applies `rule` applies, in words: 'where --task is ppl or kl, or where --curve is
    given'."""
    if rule[0] == "any":
        return ", or ".join(_wanted(config, each) for each in rule[1:])
    flag = _applies_now(config, rule)[1]
    if rule[1] == "unset":
        return f"where {flag} is not given"
    return f"where {flag} is " + ("given" if rule[1] == "nonzero" else
                                  f"{' or '.join(held_by(rule))} (alone or in a list)" if rule[1] == "has" else
                                  f"not {', '.join(map(str, rule[2]))}" if rule[1] == "not" else
                                  " or ".join(map(str, rule[1])))


def applies_rules(cls: type, prefix: str = "", inner: Mapping[str, tuple] | None = None) -> list[tuple[str, Any, tuple]]:
    """(dotted path, field, its applies rule) of every setting of `cls` and its nested groups that applies only with
    other settings: its own Mark.applies, or the rule the field holding its group gives it (Mark.inner)."""
    found = []
    for f in fields(cls):
        mark, path = mark_of(f), prefix + f.name
        rule = (inner or {}).get(f.name) or (mark.applies if mark is not None else None)
        group = group_of(cls, f.name)
        if group is not None:
            found += applies_rules(group, path + ".", dict(mark.inner) if mark is not None else {})
        elif rule:
            found.append((path, f, rule))
    return found


def check_applies(config: Any, sources: Mapping[str, str], prefix: str = "", root: Any = None,
                  library: bool = False, inner: Mapping[str, tuple] | None = None) -> None:
    """One rule for every command: a setting given on the command line or in the call that does nothing with the
    other settings (its Mark.applies, or the rule its group's field gives it: Mark.inner) is refused, naming it and
    why; never silently ignored, in a nested group as at the top. Not refused: a value from a project file or the
    environment (they serve many runs), and in a library call (`library`: where a value came from is unknown there)
    a setting a project file may hold."""
    if root is None and getattr(config, "overwrite", False) is True and getattr(config, "resume", False) is True:
        raise ConfigError("--overwrite replaces the run in --out and --resume continues it: pass one of them.")
    root = config if root is None else root
    for f in fields(config):
        value, mark, path = getattr(config, f.name), mark_of(f), prefix + f.name
        if is_dataclass(value):
            check_applies(value, sources, path + ".", root, library, dict(mark.inner) if mark is not None else {})
            continue
        origin = sources.get(path)
        rule = (inner or {}).get(f.name) or (mark.applies if mark is not None else None)
        if mark is None or rule is None or origin is None or origin.startswith(("the environment", "[")) \
                or (library and mark.project):
            continue
        applies, flag, then = _applies_now(root, rule)
        if not applies:
            label = flag_of(f) if mark.flag != "" else f.name  # a library-only setting by its name
            if isinstance(value, bool) and label.startswith("--"):  # a switch by its spelling: --no-prefix-cache
                label = label if value else "--no-" + label[2:]
            shown = (",".join(map(str, value)) if isinstance(value, (tuple, list)) else
                     f"{value:g}" if isinstance(value, float) else value)
            said = label if isinstance(value, bool) and label.startswith("--") else f"{label} {shown}"
            first = rule[1] if rule[0] == "any" else rule
            if first[1] == "unset":
                raise ConfigError(f"{said} does nothing with {flag} given: it applies only "
                                  f"{_wanted(root, rule)}; drop {label}, or drop {flag}.")
            if first[1] == "nonzero" or then is None:  # not given at all: 'with --heal None' would read as a value
                raise ConfigError(f"{said} does nothing without {flag}: it applies only "
                                  f"{_wanted(root, rule)}; drop {label}, or pass {flag}.")
            raise ConfigError(f"{said} does nothing with {flag} {then}: it applies only "
                              f"{_wanted(root, rule)}; drop {label}, or change {flag}.")


# ---- the library's entry: the same checks, before any model loads ------------------------------------------------


def _type_problem(value: Any, hint: Any) -> str | None:
    """What is wrong with `value` as a `hint` ('a whole number', ...), or None when it fits. None always fits a plain
    value (the default's meaning); a settings group must be the group, or None where the hint allows it."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    base = args[0] if optional and len(args) == 1 else hint
    if is_dataclass(base):
        if isinstance(value, base) or (value is None and optional):
            return None
        return f"a {base.__name__}"
    if value is None:
        return None
    origin = typing.get_origin(base)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return "a tuple"
        inner = [a for a in typing.get_args(base) if a is not Ellipsis]
        for item in value:
            if inner and _type_problem(item, inner[0]):
                return f"a tuple of {_type_problem(item, inner[0]).removeprefix('a ')}s"
        return None
    if base is bool:
        return None if isinstance(value, bool) else "true or false (a bool)"
    if base is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "a whole number (an int)"
    if base is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if base is str:
        return None if isinstance(value, (str, os.PathLike)) else "a string"
    return None


def _declared_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _given(config: Any, default: Any, prefix: str, found: dict[str, str]) -> None:
    """Every value of `config` that differs from `default`'s (what a caller gave), each of its declared type."""
    hints = type_hints(type(config))
    for f in fields(config):
        value, path = getattr(config, f.name), prefix + f.name
        problem = _type_problem(value, hints[f.name])
        optional = type(None) in typing.get_args(hints[f.name])
        if value is None and not optional and problem is None and _declared_default(f) is not None:  # never None
            problem = _type_problem(object(), hints[f.name])
        if problem:
            shown = f"{value!r}"[:60]
            raise ConfigError(f"{type(config).__name__}.{f.name} must be {problem}, got {shown} "
                              f"({type(value).__name__}): fix {path}.")
        group = group_of(type(config), f.name)
        if group is not None and is_dataclass(value):
            base = getattr(default, f.name, None) if default is not None else None
            _given(value, base if isinstance(base, group) else group(), path + ".", found)
        elif default is None or value != getattr(default, f.name, MISSING) or value != value:
            found[path] = f"the call's {path}"


def check_call(config: Any, cls: type, what: str) -> None:
    """A library call's settings, checked from the same declarations as the CLI's before anything loads: `config`
    is a `cls`, every field holds its declared type, and every value the caller changed from the default is within
    its declared choices and range (validate). One ConfigError naming the field."""
    if not isinstance(config, cls):
        raise ConfigError(f"{what} takes its settings as {cls.__name__}(...), got {type(config).__name__} "
                          f"{repr(config)[:40]}: pass {cls.__name__}(...).")
    given: dict[str, str] = {}
    _given(config, cls(), "", given)
    validate(config, given)
    check_applies(config, given, library=True)


def takes(cls: type, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a library command whose first argument is a `cls`: check_call before it runs."""
    import functools

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(config: Any = None, *args: Any, **kwargs: Any) -> Any:
            check_call(config, cls, what)
            if getattr(getattr(config, "model", None), "model", "") is None and not getattr(config, "from_curve", None):
                fix = " (or from_curve=, whose run names it)" if hasattr(config, "from_curve") else ""
                raise ConfigError(f"{what}: ModelOptions.model is None: pass a model{fix}, e.g. ModelOptions('minilm').")
            return command(config, *args, **kwargs)

        return run

    return wrap
