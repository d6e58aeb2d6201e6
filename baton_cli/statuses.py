"""`baton statuses list|replay`: the status error queue of the queued webhook
(shared/status_queue.py, baton_cli/error_queue.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

import click

from baton_cli.error_queue import ErrorQueue
from baton_cli.main import Env, command, emit_json, pass_env, table


def _queue(env: Env) -> ErrorQueue:

    settings = env.settings
    return ErrorQueue(settings.project, settings.status_topic)


@click.group()
def statuses() -> None:
    """Statuses the queued webhook could not apply: list them, replay them after a fix."""


@command(statuses, "list")
@click.option("--room", help="only this room's statuses (or a recipient's receipts: provider:recipient)")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@pass_env
def list_statuses(env: Env, room: str | None, limit: int, as_json: bool) -> None:
    """What the status error queue holds, oldest first, with the reason; nothing is consumed."""
    records = _queue(env).list(room, limit)
    if as_json:
        emit_json([asdict(r) for r in records])
        return
    env.console.print(table(f"{len(records)} message(s) in the status error queue",
                            ["published", "kind", "room or recipient", "statuses", "attempts", "reason"],
                            [[r.published, r.kind, r.target or "-", r.statuses, r.delivery_attempts or "-", r.reason]
                             for r in records]))


@command(statuses, "replay")
@click.option("--room", help="only this room's statuses (or a recipient's receipts: provider:recipient)")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@pass_env
def replay(env: Env, room: str | None, limit: int, as_json: bool) -> None:
    """Publish the held statuses again to the status queue (each applies once in its room), then remove
    them from the error queue, logging `statuses_replayed` with the actor per room (or recipient).
    Unroutable records are kept."""
    operators = env.operators  # built first: a replay nobody can log does not start
    replayed: Counter[str] = Counter()
    try:
        counts = _queue(env).replay(room, limit, on_replayed=lambda target: replayed.update([target]))
    finally:  # what was published before a failure is logged too, and that failure still raised
        for target, n in sorted(replayed.items()):
            try:
                operators.log_statuses_replayed(target, n, env.who)
            except Exception as exc:  # noqa: BLE001 - the replay's own outcome matters more; say what is missing
                click.echo(f"could not log statuses_replayed for {target} ({n}): {exc}", err=True)
    if as_json:
        emit_json({**counts, "actor": env.who})
    else:
        env.console.print(table(f"status replay by {env.who}", ["", ""], [[k, v] for k, v in counts.items()]))
