"""--help reads as a user needs it (issue 39, item 6): the command list gives one whole sentence per command, the
options come in sections, and MODEL's help is the same text, naming every embedded model, in every command."""

from __future__ import annotations

import functools
import re

import pytest
from typer.testing import CliRunner

from layerprobe.cli import app
from layerprobe.commands import COMMANDS as RECORDS
from layerprobe.config import MODEL_HELP

COMMANDS = [name for name, record in RECORDS.items() if record.cli is not None]  # every command the CLI offers


@functools.cache  # angular, prune and heal: their help rendered once for both tests that read it (a str, read only)
def help_of(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], terminal_width=250, max_content_width=250)
    assert result.exit_code == 0, result.output
    return result.output


def test_command_list_has_one_whole_sentence_each():
    text = help_of()
    listed = dict(re.findall(r"^  (\w+)\s{2,}(.+)$", text.split("Commands:")[1], flags=re.M))
    assert set(listed) == set(COMMANDS)
    for name, sentence in listed.items():
        assert sentence.endswith(".") and "..." not in sentence and sentence.count(". ") == 0, (name, sentence)
        assert sentence[0].isupper() and len(sentence) < 120, (name, sentence)


@pytest.mark.parametrize("command", ["angular", "prune", "export", "heal"])
def test_model_help_is_one_text_naming_every_embedded_model(command):
    text = " ".join(help_of(command).split())
    assert " ".join(MODEL_HELP.split()) in text
    for name in ("minilm", "smollm2", "gemma3"):
        assert name in MODEL_HELP


@pytest.mark.parametrize("command,sections", [
    ("angular", ["Arguments", "Options", "Model", "Data", "Run folder"]),
    ("prune", ["Arguments", "Options", "Model", "Data", "Curve (--curve)", "Run folder"]),
    ("heal", ["Arguments", "Options", "Model", "Data", "Run folder"]),
])
def test_options_come_in_sections(command, sections):
    text = help_of(command)
    found = re.findall(r"^(\S[^\n:]*):$", text, flags=re.M)
    assert found == sections, found
    model_part = text.split("\nModel:")[1].split("\nData:")[0]
    assert "--dtype" in model_part and "--tokens" not in model_part
    assert "--out" in text.split("\nRun folder:")[1]
