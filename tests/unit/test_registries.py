"""Registries refuse (issue 52, item 5): a second record under a held name is an error (a built-in command
included), a registry can be frozen, an unknown name says "Did you mean", and register(None) or a malformed record
is one line, for every registry the command records fill."""

from __future__ import annotations

import dataclasses

import pytest

from layerprobe.commands import COMMANDS, Command, register
from layerprobe.errors import ConfigError, LayerprobeError
from layerprobe.registry import Registry, UnknownName
from layerprobe.runs.columns import TABLES, Column, Table
from layerprobe.runs.keys import SUMMARIES, Key
from layerprobe.evaluation.metric import METRICS
from layerprobe.runs.kinds import KINDS
from layerprobe.strategies import STRATEGIES

REGISTRIES = {"COMMANDS": COMMANDS, "KINDS": KINDS, "SUMMARIES": SUMMARIES, "TABLES": TABLES, "METRICS": METRICS,
              "STRATEGIES": STRATEGIES}


@pytest.mark.parametrize("name", list(REGISTRIES))
def test_every_registry_refuses_another_record_under_a_held_name(name):
    registry = REGISTRIES[name]
    assert isinstance(registry, Registry) and registry
    held, record = next(iter(registry.items()))
    with pytest.raises(ConfigError, match="registered already"):
        registry[held] = object()
    assert registry[held] is record
    registry.add(held, record)  # the same record again (two commands sharing a Kind or a table): no change
    assert registry[held] is record


@pytest.mark.parametrize("name", list(REGISTRIES))
def test_every_registry_names_the_closest_for_an_unknown_name(name):
    registry = REGISTRIES[name]
    held = next(iter(registry))
    with pytest.raises(UnknownName) as caught:
        registry[held[:-1] + "q"]
    assert f"Did you mean: {held}?" in str(caught.value)
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, LayerprobeError)
    assert registry.get("nothing-like-it") is None


def test_a_built_in_command_is_never_replaced_silently():
    angular = COMMANDS["angular"]
    with pytest.raises(ConfigError, match="'angular' is registered already"):
        register(dataclasses.replace(angular, cli=None))
    assert COMMANDS["angular"] is angular


def test_a_frozen_registry_takes_nothing_and_loses_nothing():
    registry = Registry("thing")
    registry.add("a", 1)
    registry.freeze()
    for change in (lambda: registry.add("b", 2), lambda: registry.pop("a"), lambda: registry.__delitem__("a"),
                   lambda: registry.__setitem__("c", 3)):
        with pytest.raises(ConfigError, match="frozen"):
            change()
    assert dict(registry) == {"a": 1}


@pytest.mark.parametrize("record, says", [
    (None, "takes a Command record"),
    ("angular", "takes a Command record"),
    (Command(""), "name is ''"),
    (Command(3), "name is 3"),
    (Command("x", cli=3), "cli is 3"),
    (Command("x", kind="prune"), "kind is 'prune'"),
    (Command("x", summary=("key",)), "summary is ('key',)"),
    (Command("x", tables={"x.csv": ("a",)}), "tables is"),
    (Command("x", settings="Config"), "settings is 'Config'"),
])
def test_register_of_a_malformed_record_is_one_line(record, says):
    before = {name: dict(registry) for name, registry in REGISTRIES.items()}
    with pytest.raises(ConfigError) as caught:
        register(record)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert {name: dict(registry) for name, registry in REGISTRIES.items()} == before


def test_a_well_formed_record_registers_and_unregisters():
    record = Command("scratch-command", summary=(Key("k", (int,), "a key"),),
                     tables={"scratch.csv": (Column("a", "a column"),)})
    register(record)
    try:
        assert COMMANDS["scratch-command"] is record and TABLES["scratch.csv"] == Table((Column("a", "a column"),))
    finally:
        for registry, key in ((COMMANDS, "scratch-command"), (SUMMARIES, "scratch-command"), (TABLES, "scratch.csv")):
            registry.pop(key)
