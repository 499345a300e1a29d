"""Scans of the whole package's source (every module parsed once per session: tests/helpers.package_nodes, ~1 s on
2 cores, so the default tier): a command's name is typed only in its record (issue 52; the scan itself is tried on
a snippet in tests/unit/test_command_named_once.py), and no module names what the dummy package adds by its records
alone (tests/unit/test_records_added.py)."""

from __future__ import annotations

import ast

from tests.helpers import package_nodes
from tests.unit.test_command_named_once import named_in


def test_no_command_name_is_typed_where_its_record_is_meant():
    found = []
    for where, nodes in package_nodes():  # every module of the package, parsed once per session (tests/helpers.py)
        found += named_in(nodes, where)
    assert not found, "a command's name typed again (pass its record, commands.Command):\n" + "\n".join(found)


def test_no_module_of_layerprobe_names_the_added_records():
    """What the additions touch: their records and their own functions, in the dummy package only."""
    names = {"absdiff", "front", "squared"}
    found = [f"{where}:{node.lineno} {node.value!r}" for where, nodes in package_nodes() for node in nodes
             if isinstance(node, ast.Constant) and node.value in names]
    assert not found, "\n".join(found)
