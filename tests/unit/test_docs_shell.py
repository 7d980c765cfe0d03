"""Every shell snippet of README.md and docs/**/*.md is a command that works.

Snippets are fenced ```sh / ```bash blocks. Each block must pass ``bash -n``.
Each command in it (lines joined at ``\\``, split at ``&&``, ``;``, ``|``;
``sudo`` and ``VAR=value`` prefixes dropped; ``vagrant ssh -c '...'`` looked
into) is checked by what it runs:

* ``fabric-emu``: the click parser takes its command, options and values
  (``make_context``: an unknown option, a bad choice or a missing argument
  fails). ``validate`` and ``topo show`` need no root and build nothing, so
  they are run: exit 0, or 2 where the line says ``# refused``;
* ``make``: every target is one of the Makefile's;
* any command: a path into the repository (``experiments/``, ``topologies/``,
  ``examples/``, ...) exists.

Results directories (``results/...``) are what a run writes: not checked.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import warnings
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from emulator.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^\s*```\s*(sh|bash|shell)\s*$")
REPO_DIRS = ("experiments/", "topologies/", "examples/", "p4src/", "emulator/", "tests/", "bench/",
             "vagrant/", "docs/")
OPERATORS = {"&&", "||", ";", "|", "do", "then", "done", "fi", "for", "while"}
MAKE_TARGETS = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def blocks(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` of every shell block of one Markdown file."""
    out, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
            out.append((f"{path.relative_to(REPO)}:{i + 1}", "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return out


def commands(text: str) -> list[tuple[list[str], str]]:
    """``(argv, the line's comment)`` of every simple command of a block."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        comment = line.split(" #", 1)[1].strip() if " #" in line else ""
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lex.whitespace_split, lex.commenters = True, "#"
        argv: list[str] = []
        for tok in list(lex) + [";"]:
            if tok in OPERATORS or set(tok) <= set(";&|"):
                if argv:
                    out.extend(_unwrap(argv, comment))
                argv = []
            else:
                argv.append(tok)
    return out


def _unwrap(argv: list[str], comment: str) -> list[tuple[list[str], str]]:
    while argv and (argv[0] in ("sudo", "env", "time", "nice") or re.fullmatch(r"\w+=\S*", argv[0])
                    or argv[0].startswith("-")):
        argv = argv[1:]
    if argv[:2] == ["vagrant", "ssh"] and "-c" in argv:
        return commands(argv[argv.index("-c") + 1])
    return [(argv, comment)] if argv else []


ALL = [(where, argv, comment) for doc in DOCS for where, text in blocks(doc)
       for argv, comment in commands(text)]
BLOCKS = [b for doc in DOCS for b in blocks(doc)]


def test_the_docs_have_shell_snippets():
    assert len(BLOCKS) >= 20 and any(a[0].endswith("fabric-emu") for _, a, _ in ALL)


@pytest.mark.parametrize("where,text", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_block_is_valid_shell(where, text):
    done = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert done.returncode == 0, f"{where}: {done.stderr}"


def _rest(ctx: click.Context) -> list[str]:
    """What a group's context left for its subcommand (click 8 keeps the
    subcommand's name apart, in ``protected_args``; click 9 will not)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*getattr(ctx, "protected_args", []), *ctx.args]


def _parse(argv: list[str]) -> tuple[list[str], click.Context]:
    """The fabric-emu command path and its context, as click parses ``argv``."""
    ctx = main.make_context("fabric-emu", list(argv), resilient_parsing=False)
    path, cmd = [], main
    while isinstance(cmd, click.Group):
        name, cmd, args = cmd.resolve_command(ctx, _rest(ctx))
        path.append(name)
        ctx = cmd.make_context(name, list(args), parent=ctx)
    return path, ctx


@pytest.mark.parametrize("where,argv,comment", ALL, ids=[f"{w}:{a[0].rsplit('/', 1)[-1]}"
                                                         for w, a, _ in ALL])
def test_command(where, argv, comment):
    for arg in argv[1:]:
        for part in re.split(r"[=:]", arg):
            if part.startswith(REPO_DIRS) and not set(part) & set("$*<[{"):
                assert (REPO / part.rstrip(",")).exists(), f"{where}: {part} is not in the repository"
    if argv[0].endswith("fabric-emu"):
        try:
            path, _ = _parse(argv[1:])
        except click.exceptions.Exit:           # --help, --version
            return
        except click.ClickException as e:
            pytest.fail(f"{where}: {shlex.join(argv)}: {e.format_message()}")
        if path in (["validate"], ["topo", "show"]):
            res = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
            want = 2 if "refused" in comment else 0
            assert res.exit_code == want, f"{where}: {shlex.join(argv)} exited {res.exit_code}: {res.output}"
    elif argv[0] == "make":
        for target in argv[1:]:
            if "=" not in target:
                assert target in MAKE_TARGETS, f"{where}: make {target}: no such target"


def test_commands_are_split_as_the_shell_does():
    text = "make demo    # c\nsudo X=1 .venv/bin/fabric-emu run a.yaml --set 'a[0].b=1' && make test\n" \
           "vagrant ssh -c 'cd /vagrant && sudo make doctor'\nfor x in 1 2; do\n  fabric-emu show r/$x\ndone\n"
    got = [argv for argv, _ in commands(text)]
    assert got == [["make", "demo"], [".venv/bin/fabric-emu", "run", "a.yaml", "--set", "a[0].b=1"],
                   ["make", "test"], ["cd", "/vagrant"], ["make", "doctor"], ["x", "in", "1", "2"],
                   ["fabric-emu", "show", "r/$x"]]


def test_a_bad_command_fails_the_parser():
    with pytest.raises(click.ClickException, match="no-such-option"):
        _parse(["run", "experiments/demo.yaml", "--no-such-option"])
    with pytest.raises(click.ClickException, match="bmv3"):
        _parse(["run", "experiments/demo.yaml", "--target", "bmv3"])
