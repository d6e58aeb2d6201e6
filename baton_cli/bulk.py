"""`baton rooms from`: rooms found by sending number (the admin API's
`rooms.from`, shared/admin/numbers.py; the console's per-number lists)."""

from __future__ import annotations

import click

from baton_cli.main import Env, command, emit_json, pass_env, table
from baton_cli.rooms import _num, rooms


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
