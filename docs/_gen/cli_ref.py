"""The command-line reference, from the click parser (``emulator.cli.main``):
every command, its usage line, help and options as ``fabric-emu --help`` has them."""
from __future__ import annotations

import inspect
import re

import click


def _commands(group: click.Group, ctx: click.Context, prefix: list[str]):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield prefix + [name], cmd, sub
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, sub, prefix + [name])


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else
                   p.replace("<", "&lt;").replace("[", "\\[").replace("]", "\\]") for p in parts)


def _option_row(param: click.Parameter, ctx: click.Context) -> str:
    record = param.get_help_record(ctx)
    if record is None:
        return ""
    names, help_text = record
    if names == "--help":
        return ""
    d = param.default
    flag = isinstance(param, click.Option) and param.is_flag
    default = f"`{d}`" if isinstance(d, (str, int, float)) and not flag and d != "" else ""
    extra = " Repeatable." if getattr(param, "multiple", False) and "repeatable" not in help_text else ""
    flags, metavar = re.match(r"^((?:-{1,2}[\w-]+(?:, )?)+)\s*(.*)$", names).groups()
    shown = f"`{flags}` {_cell(metavar)}".strip()       # a `|` in a code span shows its backslash
    return f"| {shown} | {default} | {_cell(help_text)}{extra} |"


def cli_page() -> str:
    from emulator.cli import main
    root = click.Context(main, info_name="fabric-emu")
    out = ["# Command line", "",
           "Every `fabric-emu` command and option, generated from the click parser "
           "(`emulator/cli.py`) when the site is built: what `fabric-emu COMMAND --help` prints. "
           "Bad input exits with status 2 and one line naming the file, the field and the reason; "
           "a run that fails exits 1.", "",
           "```text", root.get_usage(), "```", ""]
    for path, cmd, ctx in _commands(main, root, []):
        title = " ".join(path)
        out += [f"## fabric-emu {title}", "", "```text", ctx.get_usage(), "```", ""]
        if cmd.help:
            out += [inspect.cleandoc(cmd.help), ""]
        rows = [r for p in cmd.get_params(ctx) if isinstance(p, click.Option)
                for r in [_option_row(p, ctx)] if r]
        args = [p for p in cmd.get_params(ctx) if isinstance(p, click.Argument)]
        if args:
            out += ["Arguments: " + ", ".join(
                f"`{a.human_readable_name}`{' (one or more)' if a.nargs == -1 else ''}" for a in args), ""]
        if rows:
            out += ["| option | default | what it does |", "|---|---|---|", *rows, ""]
    return "\n".join(out)
