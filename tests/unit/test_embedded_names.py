"""Embedded model names are matched case-insensitively to one canonical name (issue 49): `angular SmolLM2` files
under reports/smollm2/, and records and the --resume identity say smollm2 whatever was typed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from layerprobe.commands import COMMANDS
from layerprobe.config import AngularConfig, HealConfig, ModelOptions, PruneConfig, canonical_model
from layerprobe.settings import identity, resolve


@pytest.mark.parametrize("typed, canonical", [("SmolLM2", "smollm2"), ("SMOLLM2-135M", "smollm2"),
                                              ("MiniLM", "minilm"), ("all-MiniLM-L6-v2", "minilm"),
                                              ("Gemma3", "gemma3"), ("gemma3-270M", "gemma3")])
def test_typed_names_file_and_identify_as_one(typed, canonical):
    for cls, command in ((AngularConfig, "angular"), (PruneConfig, "prune"), (HealConfig, "heal")):
        config, _ = resolve(cls, {"model": {"model": typed}}, {})
        assert config.model.model == canonical
        assert Path(COMMANDS[command].out(config, config.model.model)).parts[:2] == ("reports", canonical)
        plain, _ = resolve(cls, {"model": {"model": canonical}}, {})
        assert identity(config) == identity(plain)
    assert dataclasses.replace(ModelOptions("minilm"), model=typed).model == canonical


def test_other_specs_are_kept_as_given():
    for spec in ("HuggingFaceTB/SmolLM2-135M", "./SmolLM2", "/data/Gemma3", None):
        assert canonical_model(spec) == spec and ModelOptions(spec).model == spec
