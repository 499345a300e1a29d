"""Registries of named records (commands, their run kinds, summary keys, CSV tables, task-free metrics, curve
strategies): a dict that refuses a second, different record under a name it holds, can be frozen once the built-ins
are in, and answers an unknown name with "Did you mean" (lm-eval's registries raise on a collision and can freeze; a
plain dict silently keeps one)."""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterator

from layerprobe.errors import ConfigError


class UnknownName(ConfigError, KeyError):
    """A name no record has: a LayerprobeError for users, a KeyError for code that looks names up."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0]) if self.args else ""


def did_you_mean(name: Any, known: Any) -> str:
    """' Did you mean: x?' for the closest known name, else ' Known: a, b, c.'."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" Did you mean: {close[0]}?" if close else f" Known: {', '.join(map(str, known)) or 'none'}."


class Names:
    """The names a registry holds (those whose record `accepts`), then `more`, read each time they are asked for: a
    setting's choices, or the values an option does not apply with, that a record registered later joins (a
    strategy, a metric)."""

    def __init__(self, registry: dict, accepts: Callable[[Any], bool] | None = None, more: tuple = ()) -> None:
        self.registry, self.accepts, self.more = registry, accepts, tuple(more)

    def _now(self) -> list[str]:
        held = [name for name, record in self.registry.items() if self.accepts is None or self.accepts(record)]
        return held + [name for name in self.more if name not in held]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __contains__(self, name: Any) -> bool:
        return name in self._now()

    def __len__(self) -> int:
        return len(self._now())

    def __getitem__(self, index: Any) -> Any:
        return self._now()[index]

    def __repr__(self) -> str:
        return repr(tuple(self._now()))


class Registry(dict):
    """name -> record. `add` refuses a name already holding another record (the same record again is a no-op: two
    commands may share a Kind or a table); `freeze` makes it read-only; a missing name is an UnknownName."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what  # 'command', 'run kind', ...: the messages' word
        self.frozen = False

    def add(self, name: str, record: Any) -> Any:
        self._check_open(f"register {self.what} '{name}'")
        held = dict.get(self, name)
        if held is not None and held is not record and held != record:
            raise ConfigError(f"A {self.what} named '{name}' is registered already: give the new one another name "
                              f"(or unregister '{name}' first); a registry never replaces a record silently.")
        dict.__setitem__(self, name, record)
        return record

    def names(self, accepts: Callable[[Any], bool] | None = None, more: tuple = ()) -> Names:
        """Its names (those whose record `accepts`), then `more`, read when asked: a setting's choices
        (settings.Mark.choices) or the values it does not apply with (Mark.applies)."""
        return Names(self, accepts, more)

    def freeze(self) -> None:
        """No record added or removed from now on (a built-in can no longer be replaced or dropped)."""
        self.frozen = True

    def _check_open(self, doing: str) -> None:
        if self.frozen:
            raise ConfigError(f"Cannot {doing}: the {self.what} registry is frozen (after the built-ins registered).")

    def __setitem__(self, name: str, record: Any) -> None:
        self.add(name, record)

    def __delitem__(self, name: str) -> None:
        self._check_open(f"unregister {self.what} '{name}'")
        dict.__delitem__(self, name)

    def pop(self, name: str, *default: Any) -> Any:
        self._check_open(f"unregister {self.what} '{name}'")
        return dict.pop(self, name, *default)

    def setdefault(self, name: str, record: Any = None) -> Any:
        return dict.get(self, name) if name in self else self.add(name, record)

    def __missing__(self, name: str) -> Any:
        raise UnknownName(f"Unknown {self.what} '{name}'.{did_you_mean(name, list(self))}")
