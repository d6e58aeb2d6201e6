"""`baton statuses list|replay`: the status error queue of the queued webhook
(shared/status_queue.py, shared/admin/error_queue.py)."""

from __future__ import annotations

import click

from baton_cli.main import Env, bulk_options, command, confirm_bulk, emit_json, pass_env, table


@click.group()
def statuses() -> None:
    """Statuses the queued webhook could not apply: list them, replay them after a fix."""


@command(statuses, "list")
@click.option("--room", help="only this room's statuses (or a recipient's receipts: provider:recipient)")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@pass_env
def list_statuses(env: Env, room: str | None, limit: int, as_json: bool) -> None:
    """What the status error queue holds, oldest first, with the reason; nothing is consumed."""
    records = env.call("statuses.list", room=room, limit=limit)
    if as_json:
        emit_json(records)
        return
    env.console.print(table(f"{len(records)} message(s) in the status error queue",
                            ["published", "kind", "room or recipient", "statuses", "attempts", "reason"],
                            [[r["published"], r["kind"], r["room_id"] or r.get("recipient_key") or "-", r["statuses"],
                              r["delivery_attempts"] or "-", r["reason"]] for r in records]))


@command(statuses, "replay")
@click.option("--room", help="only this room's statuses (or a recipient's receipts: provider:recipient)")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@bulk_options
@pass_env
def replay(env: Env, room: str | None, limit: int, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Publish the held statuses again to the status queue (each applies once in its room), then remove
    them from the error queue, logging `statuses_replayed` with your identity per room (or recipient).
    Unroutable records are kept. Says how many it would replay and asks first (--yes: does not ask;
    --dry-run: only says)."""
    preview = env.call("statuses.replay", room=room, limit=limit, dry_run=True)
    if not confirm_bulk(env, "status replay", preview, dry_run, yes, as_json):
        return
    counts = env.call("statuses.replay", room=room, limit=limit)
    if as_json:
        emit_json(counts)
    else:
        env.console.print(table("status replay", ["", ""], [[k, v] for k, v in counts.items()]))
