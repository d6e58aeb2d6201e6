"""`baton dead-letters list|redrive`."""

from __future__ import annotations

import click

from baton_cli.main import Env, bulk_options, command, confirm_bulk, emit_json, pass_env, show_results, table


@click.group("dead-letters")
def dead_letters() -> None:
    """Messages waiting for an operator: parked in their room, or kept after baton gave up."""


@command(dead_letters, "list")
@click.option("--room", help="only this room's")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 5000))
@pass_env
def list_dead_letters(env: Env, room: str | None, limit: int, as_json: bool) -> None:
    """Parked and kept dead letters, oldest first, with where each stands now."""
    items = env.call("dead_letters.list", room=room, limit=limit)
    if as_json:
        emit_json(items)
        return
    env.console.print(table(f"{len(items)} dead letter(s)", ["id", "message", "kind", "attempts", "since", "status",
                                                             "reason"], [
        [d["id"], d["message_id"], d["kind"], d["attempts"], d["since"], d["status"], d["reason"]] for d in items]))


@command(dead_letters, "redrive")
@click.argument("dead_letter_id", required=False, metavar="ID")
@click.option("--room", help="every waiting dead letter of this room")
@click.option("--all", "all_", is_flag=True, help="every waiting dead letter of every room")
@click.option("--reason", required=True, help="why (logged with your identity)")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 5000), help="with --all: at most")
@bulk_options
@pass_env
def redrive(env: Env, dead_letter_id: str | None, room: str | None, all_: bool, reason: str, limit: int,
            dry_run: bool, yes: bool, as_json: bool) -> None:
    """Redrive ID (ROOM:INCARNATION:SEQ), or --room R, or --all: the message goes back to the head of its
    room, ahead of the messages that came after it, and is sent when nothing is in flight. With --room or
    --all it first says how many rooms and messages it would redrive and asks (--yes: does not ask;
    --dry-run: only says)."""
    if sum(x is not None for x in (dead_letter_id, room, True if all_ else None)) != 1:
        raise click.UsageError("give exactly one of ID, --room R or --all")
    if dead_letter_id:
        show_results(env, env.call("dead_letters.redrive", id=dead_letter_id, reason=reason), as_json)
        return
    scope = {"room": room, "all": all_ or None, "reason": reason, "limit": limit}
    preview = env.call("dead_letters.redrive", dry_run=True, **scope)
    if confirm_bulk(env, "redrive", preview, dry_run, yes, as_json):
        show_results(env, env.call("dead_letters.redrive", **scope), as_json)
