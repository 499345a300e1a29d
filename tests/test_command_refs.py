"""Every name in COMMANDS and KINDS resolves to a function: each 'module:function' string is imported, which loads
every command's run and reader (transformers, peft, matplotlib: seconds), so this runs in the default tier, not the
unit tier (issue 52 item 7). A bad ref's message and the dummy command's refs: tests/unit/test_commands.py."""

from __future__ import annotations

from layerprobe.commands import COMMANDS
from layerprobe.runs.kinds import KINDS
from tests.unit.test_commands import refs, unresolved


def test_every_named_function_of_every_record_resolves():
    bad = [line for command in COMMANDS.values() for line in unresolved(command)]
    bad += [line for kind in KINDS.values() for line in unresolved(kind)]
    assert not bad, "refs that name no function:\n" + "\n".join(bad)
    for command in COMMANDS.values():
        if command.kind is not None:
            assert KINDS[command.name] is command.kind
    fields = {label.split(".", 1)[1] for kind in KINDS.values() for label, _ in refs(kind)}
    assert {"findings", "data_table", "comparer", "overlay"} <= fields  # the check reaches every kind of ref
