"""The `baton` operator CLI (entry point `baton_cli.main:main`)."""

from __future__ import annotations

import click


def GROUPS() -> list[click.Command]:  # noqa: N802 - a registry, read like a constant
    """The commands and command groups of `baton`, in help order. A new group
    is a module of this package with a `click.Group`, and one line here."""
    import baton_cli.bulk  # noqa: F401 - adds `rooms to|from|bulk` to the `rooms` group
    from baton_cli.console import console
    from baton_cli.dead_letters import dead_letters
    from baton_cli.deployment import pause_all, resume_all, status
    from baton_cli.outcomes import outcomes
    from baton_cli.rejects import rejects
    from baton_cli.rooms import rooms
    from baton_cli.scheduled import scheduled
    from baton_cli.statuses import statuses

    return [status, pause_all, resume_all, rooms, dead_letters, rejects, statuses, scheduled, outcomes, console]
