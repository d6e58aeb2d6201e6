"""`baton rooms to|from|bulk`: rooms found by recipient or by sending
number, and one action on many rooms (the admin API's `rooms.to`,
`rooms.from` and `rooms.bulk`, shared/admin/bulk.py and
shared/admin/numbers.py; the console's recipient search, per-number lists
and bulk form)."""

from __future__ import annotations

import sys
from typing import Any

import click

from baton_cli.main import EXIT_ERROR, Env, command, emit_json, pass_env, table
from baton_cli.rooms import _num, rooms

BULK_ACTIONS = ("pause", "resume", "skip", "redrive")  # shared/admin/bulk.py's BULK_ACTIONS


@command(rooms, "to")
@click.argument("recipient")
@click.option("--provider", help="only this provider's rooms (default: every enabled provider)")
@pass_env
def rooms_to(env: Env, recipient: str, provider: str | None, as_json: bool) -> None:
    """Rooms whose message in flight goes to RECIPIENT (a phone number or a platform's user id).
    Rooms that only queue a message for it are not found (the queue is not indexed)."""
    found = env.call("rooms.to", recipient=recipient, provider=provider)
    if as_json:
        emit_json(found)
        return
    by_room = {r: p for p, rs in found["by_provider"].items() for r in rs}
    env.console.print(table(f"{len(found['rooms'])} room(s) with a message in flight to it", ["room", "provider"],
                            [[r, by_room.get(r)] for r in found["rooms"]]))


@command(rooms, "from")
@click.argument("number")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="the `next` cursor a previous page printed")
@pass_env
def rooms_from(env: Env, number: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """Rooms with a message in flight from WhatsApp number NUMBER (a phone-number id of WHATSAPP_SENDERS),
    by room id; paginated."""
    page = env.call("rooms.from", number=number, limit=limit, cursor=cursor)
    rows, next_cursor = page["rooms"], page["next"]
    if as_json:
        emit_json({"rooms": rows, "next": next_cursor})
        return
    env.console.print(table(f"{len(rows)} room(s) sending from {number}", ["room", "state", "in flight", "queued",
                                                                          "head age ms", "paused / blocked"], [
        [r["room_id"], r["state"], r["in_flight"], r["queued"], _num(r["head_age_ms"]), r["paused"] or r["blocked"]]
        for r in rows]))
    if next_cursor:
        env.console.print(f"next page: --cursor '{next_cursor}'")


@command(rooms, "bulk")
@click.argument("action", type=click.Choice(BULK_ACTIONS))
@click.argument("room_ids", nargs=-1, metavar="[ROOM]...")
@click.option("--list", "kind", type=click.Choice(("stuck", "lag", "paused", "parked")),
              help="instead of ROOMs: the first --limit rooms of this listing (as `rooms list`)")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 500), help="with --list: how many")
@click.option("--older-than", default="0s", show_default=True, help="with --list stuck: overdue by more than this")
@click.option("--reason", required=True, help="why (logged with your identity in every room)")
@click.option("--yes", "-y", is_flag=True, help="do it; without --yes only the dry run is shown")
@pass_env
def bulk(env: Env, action: str, room_ids: tuple[str, ...], kind: str | None, limit: int, older_than: str,
         reason: str, yes: bool, as_json: bool) -> None:
    """ACTION (pause, resume, skip the head of line, redrive the waiting dead letters) on each ROOM, or on
    the first --limit rooms of --list KIND. A dry run by default: it shows what each room would see and
    changes nothing; --yes then does it, room by room (a skip skips the seq the dry run showed)."""
    from baton_cli.main import parse_duration_ms

    if bool(room_ids) == bool(kind):
        raise click.UsageError("give the rooms (ROOM...) or --list KIND, not both")
    scope: dict[str, Any] = {"action": action, "reason": reason}
    scope.update({"rooms": list(room_ids)} if room_ids else
                 {"kind": kind, "limit": limit, "older_than_ms": parse_duration_ms(older_than)})
    preview = env.call("rooms.bulk", dry_run=True, **scope)
    if not yes:
        _show(env, preview, f"dry run of {action}, nothing changed (add --yes to do it)", as_json)
        return
    # The rooms the dry run showed a change for, each skip on the seq it showed: not a later head of line.
    touched = [r for r in preview["per_room"] if r["changes"]]
    if not touched:
        _show(env, preview, f"{action}: nothing to do", as_json)
        return
    done = env.call("rooms.bulk", action=action, reason=reason, rooms=[r["room_id"] for r in touched],
                    seqs={r["room_id"]: r["seq"] for r in touched if r.get("seq") is not None} or None)
    _show(env, done, f"{action} by {done.get('actor')}", as_json)
    if any(r.get("error") for r in done["per_room"]):
        sys.exit(EXIT_ERROR)


def _show(env: Env, answer: dict[str, Any], title: str, as_json: bool) -> None:
    if as_json:
        emit_json(answer)
        return
    env.console.print(table(f"{title}: {answer['messages']} message(s) in {answer['rooms']} room(s)",
                            ["room", "changes", "messages", "seq", "error"],
                            [[r["room_id"], "yes" if r["changes"] else "no", r["messages"], r.get("seq"),
                              r.get("error")] for r in answer["per_room"]]))
