"""docs/cli.md: every command's --help, rendered from the same declarations (`python -m layerprobe.cli.docs >
docs/cli.md`; a test fails when the file and --help disagree)."""

from __future__ import annotations

WIDTH = 100
HEADER = """# Command reference

Generated from `layerprobe COMMAND --help` (`python -m layerprobe.cli.docs > docs/cli.md`), which is generated from
the settings' own declarations in `layerprobe/config.py`. Every setting marked as a project setting also reads
`LAYERPROBE_<NAME>` and `[tool.layerprobe] <name>`: the command line wins, then the environment, then the project
file, then the default.
"""


def render_reference() -> str:
    """The reference page: one section per command, its --help at a fixed width."""
    import click
    import typer

    from layerprobe.cli import app

    group = typer.main.get_command(app)
    from layerprobe.config import KEYS

    keys = ", ".join(f"`{k}`" for k in KEYS if k not in ("tasks", "tolerance", "out"))
    parts = [HEADER + f"\nProject settings: {keys}; also `out` (the parent folder of every run folder), `tasks` (the "
             "first is the task) and `tolerance` (compare's table).\n"]
    top = click.Context(group, info_name="layerprobe", terminal_width=WIDTH, max_content_width=WIDTH)
    parts.append(f"## `layerprobe`\n\n```text\n{group.get_help(top).rstrip()}\n```\n")
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        ctx = click.Context(command, info_name=f"layerprobe {name}", terminal_width=WIDTH, max_content_width=WIDTH)
        parts.append(f"## `layerprobe {name}`\n\n```text\n{command.get_help(ctx).rstrip()}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render_reference(), end="")
