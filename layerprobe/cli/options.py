"""Every command's options, built from the settings' own declarations (config.py, settings.Mark): one help text,
one flag, one default per setting, shared by every command that has it; docs/cli.md is the same text."""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import MISSING
from typing import Any, Callable, Optional

import typer
import typer.core

from layerprobe.cli.argv import COMMAND_LINE
from layerprobe.errors import LayerprobeError
from layerprobe.settings import _base_type, flag_of, mark_of, parse_text, walk


def _default_text(value: Any) -> str | None:
    if value is None or value is False or value == ():
        return None
    if value is True:
        return "on"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _lookup(base: Any, path: str) -> Any:
    for name in path.split("."):
        base = getattr(base, name, None) if base is not None else None
    return base


def options_of(cls: type, base: Any = None, skip: tuple[str, ...] = (), helps: dict[str, str] | None = None,
               required: tuple[str, ...] = ()) -> list[tuple[inspect.Parameter, str, Any, Any, list[str]]]:
    """(Typer parameter, dotted path, field, owning class, hidden alias parameter names) for every setting of `cls`
    that has a flag; `base` holds this command's defaults (shown in the help); `skip` drops dotted paths."""
    base = base if base is not None else cls()
    found = []
    for path, f, owner in walk(cls):
        mark = mark_of(f)
        if mark is None or mark.flag == "" or path in skip or any(path.startswith(s + ".") for s in skip):
            continue
        if f.default is MISSING and f.default_factory is MISSING or _is_group(owner, f.name):
            continue
        kind = _base_type(owner, f.name)
        text_kind = kind in (tuple, list) or mark.parse is not None
        annotation = Optional[str] if text_kind else Optional[kind]
        flag = flag_of(f)
        names = f"{flag}/--no-{flag[2:]}" if mark.negative else flag
        help_text = (helps or {}).get(path, mark.help)
        shown = _default_text(_lookup(base, path))
        if shown is not None and path not in required and "default" not in help_text:
            help_text = f"{help_text} (default {shown})"
        name = path.replace(".", "__")
        default = ... if path in required else None
        option = typer.Option(default, names, help=help_text, show_default=False, rich_help_panel=panel_of(path))
        params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)]
        aliases = []
        for i, alias in enumerate(mark.aliases):
            aliases.append(f"{name}__alias{i}")
            params.append(inspect.Parameter(aliases[-1], inspect.Parameter.KEYWORD_ONLY,
                                            default=typer.Option(None, alias, hidden=True), annotation=annotation))
        found.append((params, path, f, owner, aliases))
    return found


def _is_group(owner: type, name: str) -> bool:
    from layerprobe.settings import group_of

    return group_of(owner, name) is not None


def with_settings(cls: type, base: Any = None, skip: tuple[str, ...] = (), helps: dict[str, str] | None = None,
                  required: tuple[str, ...] = (), arguments: dict[str, str] | None = None
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a Typer command the options of every setting of `cls` (nested groups included); the command receives
    what the user gave as `given`, nested like the settings ({"model": {"dtype": ...}, "task": ...}; None = not
    given), ready for settings.resolve. `arguments`: the command's own parameters that are settings too (its MODEL
    argument: {"model": "model.model"}), nested into `given` by their dotted name."""
    table = options_of(cls, base, skip, helps, required)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(command).parameters.values() if p.name != "given"]

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            given: dict[str, Any] = {}
            for params, path, f, owner, aliases in table:
                value = kwargs.pop(params[0].name, None)
                for alias in aliases:
                    other = kwargs.pop(alias, None)
                    value = other if value is None else value
                if isinstance(value, str) and (_base_type(owner, f.name) in (tuple, list) or mark_of(f).parse):
                    try:
                        value = parse_text(owner, f, value, flag_of(f))
                    except LayerprobeError as exc:
                        from layerprobe.cli.common import fail

                        raise fail(str(exc)) from None
                _nest(given, path, value)
            for name, path in (arguments or {}).items():
                _nest(given, path, kwargs.get(name))
            return command(**kwargs, given=given)

        generated = [p for params, *_ in table for p in params]
        hints = {k: v for k, v in typing.get_type_hints(command).items() if k not in ("given", "return")}
        run.__signature__ = inspect.Signature(own + generated)  # type: ignore[attr-defined]
        run.__annotations__ = hints | {p.name: p.annotation for p in generated}
        del run.__wrapped__  # Typer reads __signature__, not the command's own
        return run

    return decorate


def _nest(into: dict, path: str, value: Any) -> None:
    *groups, name = path.split(".")
    for group in groups:
        into = into.setdefault(group, {})
    into[name] = value


def given_any(given: dict, group: str) -> list[str]:
    """The dotted names given in a nested group (for 'this option needs that one' checks)."""
    inner = given.get(group) or {}
    return [f"{group}.{k}" for k, v in inner.items() if v is not None and v is not False]


def option(cls: type, name: str, default: Any = None) -> Any:
    """One setting's Typer option, for a command that takes it without the rest of `cls` (merge's --format)."""
    from dataclasses import fields

    f = next(f for f in fields(cls) if f.name == name)
    mark = mark_of(f)
    flag = flag_of(f)
    return typer.Option(default, f"{flag}/--no-{flag[2:]}" if mark.negative else flag, help=mark.help,
                        show_default=False)


# ---- help layout: one sentence per command in the list, options grouped by what they are about ------------------

RUN_FOLDER = "Run folder"
PANELS = {"model": "Model", "data": "Data", "train": "Training (--steps)", "curve": "Curve (--curve)",
          "heal": "Healing"}
_RUN_FOLDER_FIELDS = ("out", "overwrite", "resume", "save_every", "formats")
_ORDER = ("Arguments", "Options", *PANELS.values(), RUN_FOLDER)


def panel_of(path: str) -> str:
    """The help section of a setting: its group's (model., data., ...), the run folder's, or the command's own."""
    group = path.split(".")[0]
    if "." in path and group in PANELS:
        return PANELS[group]
    return RUN_FOLDER if path in _RUN_FOLDER_FIELDS else "Options"


def model_argument(more: str = "") -> Any:
    """MODEL, with the one help text (config.MODEL_HELP) every command shares, and what this command adds."""
    from layerprobe.config import MODEL_HELP

    return typer.Argument(None, help=f"{MODEL_HELP} {more}".strip(), show_default=False)


class SectionedCommand(typer.core.TyperCommand):
    """Plain-text help whose options come in sections (their rich_help_panel): the command's own options first,
    then the model, the data, ..., the run folder; --help last."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            panel = "Arguments" if param.param_type_name == "argument" else param.rich_help_panel or "Options"
            sections.setdefault(panel, []).append(record)
        rank = {name: i for i, name in enumerate(_ORDER)}
        for name in sorted(sections, key=lambda n: rank.get(n, len(rank))):
            with formatter.section(name):
                formatter.write_dl(sections[name])


class SentenceGroup(typer.core.TyperGroup):
    """The command list shows each command's first paragraph (one sentence saying what it is for) whole. The
    words of the command line are kept (COMMAND_LINE), so Ctrl-C can name the line that resumes."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        command = self.get_command(ctx, args[0]) if args else None
        COMMAND_LINE.clear()
        COMMAND_LINE.update(words=list(args), resumes=command is not None and any(
            "--resume" in getattr(p, "opts", ()) for p in command.params))
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, (command.help or "").strip().split("\n\n")[0].replace("\n", " ")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
