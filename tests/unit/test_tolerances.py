"""compare's tolerance keys are declared in the records (Kind.tolerances): parse_tolerances, --tolerance's help and
docs/cli.md read them, and a kind that declares a new key makes it accepted with its default."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

import layerprobe.commands  # noqa: F401 (registers the built-in records)
from layerprobe.cli import app
from layerprobe.errors import ConfigError
from layerprobe.runs.compare import parse_tolerances
from layerprobe.runs.kinds import KINDS, Tolerance, tolerances


def test_the_built_in_keys_and_defaults():
    # the contract CI jobs rely on (README, docs/cli.md): these keys with these defaults
    assert parse_tolerances(None) == {"angular": 0.02, "prune": 0.05, "gradnorm": 0.25, "variance": 0.25}
    assert parse_tolerances(["prune=0.1"], {"angular": 0.5}) == {"angular": 0.5, "prune": 0.1, "gradnorm": 0.25,
                                                                  "variance": 0.25}
    with pytest.raises(ConfigError, match="Unknown tolerance 'angluar': use angular, prune, gradnorm, variance"):
        parse_tolerances(["angluar=0.1"])


def test_help_lists_every_declared_key_with_its_default():
    text = " ".join(CliRunner().invoke(app, ["compare", "--help"], terminal_width=400).output.split())
    for key, declared in tolerances().items():
        assert f"{key} ({' '.join(declared.meaning.split())}; default {declared.default:g})" in text


def test_a_kind_declaring_a_key_makes_it_a_tolerance(monkeypatch):
    kind = dataclasses.replace(KINDS["toy"], name="dummy", tolerances=(Tolerance("dummy", 0.1, "absolute change"),))
    monkeypatch.setitem(KINDS, "dummy", kind)
    assert parse_tolerances(["dummy=0.3"])["dummy"] == 0.3 and parse_tolerances(None)["dummy"] == 0.1
