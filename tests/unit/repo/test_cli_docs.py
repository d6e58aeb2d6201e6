"""Every `baton ...` command the docs and the code name exists, with the
options they give it (issue 44: "one name for each command everywhere";
`baton redrive`, named in five places, never existed). infra/*.tf other than
admin.tf are left out here: their descriptions are Terraform's (and the
infra tests') to check."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from baton_cli import GROUPS
from baton_cli.main import cli

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "Makefile",
           *sorted((ROOT / "mk").glob("*.mk")), ROOT / "infra" / "admin.tf",
           *(p for d in ("shared", "baton_cli", "tools", "functions", "pipeline") for p in sorted((ROOT / d).rglob("*.py")))]
QUOTED = re.compile(r"`(baton(?: [^`]*)?)`")
PROMPT = re.compile(r"^\s*(?:\$ |\$\(VENV\)/bin/|\.venv/bin/)(baton .*)$", re.M)
PLACEHOLDER = re.compile(r"^(\.\.\.|ARGS|[A-Z_]+)$")


def commands() -> click.Group:
    for command in GROUPS():
        cli.add_command(command)
    return cli


def mentions() -> list[tuple[str, str]]:
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for m in [*QUOTED.finditer(text), *PROMPT.finditer(text)]:
            # A mention wrapped over lines of a comment or docstring reads as one line.
            found.append((f"{path.relative_to(ROOT)}", re.sub(r"\s*\n\s*(?:#\s*)?", " ", m.group(1))))
    return found


def problem(line: str, root: click.Group) -> str | None:
    """Why `line` is not a command of `root`, or None."""
    tokens = [t for t in line.replace("[", " ").replace("]", " ").split() if t not in ("/", "or")][1:]
    if not tokens:
        return None  # the tool's name alone
    context = click.Context(root)
    command: click.Command = root
    known = {o for p in root.params for o in p.opts}
    takes_value = {o for p in root.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
    i = 0
    while i < len(tokens) and tokens[i].startswith("--"):  # global options
        name = tokens[i].split("=")[0]
        if name not in known and name not in ("--help", "--version"):
            return f"no global option {name}"
        i += 2 if name in takes_value and "=" not in tokens[i] else 1
    while isinstance(command, click.Group) and i < len(tokens):
        token = tokens[i]
        if PLACEHOLDER.match(token):
            return None
        names = token.split("|")
        missing = [n for n in names if command.get_command(context, n) is None]
        if missing:
            return f"no command {' '.join(missing)} in `{command.name}`"
        command = command.get_command(context, names[0])  # type: ignore[assignment]
        i += 1
        if len(names) > 1:
            return None  # `list|replay`: alternatives, options not checked
    options = {o for p in command.params for o in p.opts} | {"--json", "--help", "-h"}
    for token in tokens[i:]:
        if token.startswith("-") and not token.startswith("---"):
            name = token.split("=")[0].rstrip(",.;:)")
            if name.startswith("--") and name not in options:
                return f"`{command.name}` has no option {name}"
    return None


def test_the_docs_and_the_code_name_commands_in_their_own_places():
    assert len(mentions()) > 30  # the scan finds them
    root = commands()
    wrong = [(where, line, why) for where, line in mentions() if (why := problem(line, root))]
    assert wrong == []


@pytest.mark.parametrize("line", ["baton redrive", "baton rooms redrive ROOM", "baton --database D rooms list",
                                  "baton rooms list --stale"])
def test_a_command_or_option_that_does_not_exist_is_caught(line):
    assert problem(line, commands()) is not None
