"""The `baton` operator CLI (entry point `baton_cli.main:main`)."""

from __future__ import annotations

import click


def GROUPS() -> list[click.Group]:  # noqa: N802 - a registry, read like a constant
    """The command groups of `baton`, in help order. A new group is a module
    of this package with a `click.Group`, and one line here."""
    from baton_cli.dead_letters import dead_letters
    from baton_cli.rejects import rejects
    from baton_cli.rooms import rooms
    from baton_cli.scheduled import scheduled
    from baton_cli.statuses import statuses

    return [rooms, dead_letters, rejects, statuses, scheduled]
