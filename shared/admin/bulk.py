"""Actions on many rooms at once, and rooms found by recipient: the admin
API's `rooms.bulk` and `rooms.to` (the console's bulk form and recipient
search, shared/console/app.py; `baton` can send them too).

`rooms.bulk` runs one room action (`pause`, `resume`, `skip` the head of
line, `redrive` the room's waiting dead letters) on each room of a
selection (`rooms`, at most BULK_MAX) or of one listing (`kind`: the first
`limit` rooms of `rooms.list`), room by room through the same
`shared.operators.Operators` calls as the one-room actions: each room's
events carry the operator's identity (`actor`) and reason, so the action
shows in every room's timeline. A room that fails (no document, a refused
transaction) is reported in its row and does not stop the others. With
`dry_run` it changes nothing and answers what each room would see (the
one-room dry runs, shared/admin/actions.py): for `skip`, the seq it would
skip, which the confirmed run is given back (`seqs`) so it skips what the
operator saw, not a later head.
"""

from __future__ import annotations

from typing import Any

from shared.admin.actions import Admin, Args, BadRequest, NotFound, _room_preview

BULK_MAX = 500
BULK_ACTIONS = ("pause", "resume", "skip", "redrive")


def _head_seq(info: dict[str, Any]) -> int | None:
    """The seq at the head of a room's line (`Operators.describe`): in flight, else the first queued."""
    flight = info.get("in_flight_detail")
    if flight:
        return int(flight["seq"])
    first = (info.get("next_ids") or [None])[0]
    return int(first.split(" ", 1)[0]) if first else None


def _targets(admin: Admin, args: Args) -> list[str]:
    """The rooms a bulk action names: `rooms` (a list of ids), or the first `limit` of listing `kind`."""
    rooms, kind = args.raw.get("rooms"), args.text("kind")
    if (rooms is None) == (kind is None):
        raise BadRequest("give exactly one of `rooms` (a list of room ids) or `kind` (a listing)")
    if rooms is not None:
        if not isinstance(rooms, list) or not all(isinstance(r, str) and r.strip() for r in rooms):
            raise BadRequest("`rooms` must be a list of room ids")
        if len(rooms) > BULK_MAX:
            raise BadRequest(f"at most {BULK_MAX} rooms at once")
        return list(dict.fromkeys(r.strip() for r in rooms))
    limit, cursor = args.number("limit", 100, 1, BULK_MAX), None
    out: list[str] = []
    while len(out) < limit:
        try:
            rows, cursor = admin.operators.list_rooms(kind or "", min(200, limit - len(out)), cursor,
                                                      args.number("older_than_ms", 0, 0, 10**12))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        out += [str(row["room_id"]) for row in rows]
        if cursor is None:
            break
    return out


def rooms_bulk(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """`action` on each room of `rooms` or of listing `kind` (module
    docstring), with `reason`. Answers `rooms` and `messages` (touched, or
    with `dry_run` that would be) and `per_room` rows (`room_id`, `changes`,
    `messages`, `seq` for a skip, `error`)."""
    action = args.text("action", required=True) or ""
    if action not in BULK_ACTIONS:
        raise BadRequest(f"`action` must be one of {', '.join(BULK_ACTIONS)}")
    reason = args.text("reason", required=True) or ""
    seqs = args.raw.get("seqs") or {}
    if not isinstance(seqs, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in seqs.values()):
        raise BadRequest("`seqs` must map room ids to whole numbers")
    dry_run, ops = args.flag("dry_run"), admin.operators
    rows: list[dict[str, Any]] = []
    for room in _targets(admin, args):
        row: dict[str, Any] = {"room_id": room, "changes": False, "messages": 0}
        try:
            if action == "redrive":
                waiting = [d for d in ops.dead_letters(room, 1000) if d.status == "waiting"]
                row.update(changes=bool(waiting), messages=len(waiting))
                if waiting and not dry_run:
                    results = ops.redrive_many(waiting, actor, reason)
                    row["messages"] = sum(1 for r in results if r.changed)
            elif action == "skip":
                seq = seqs.get(room)
                if seq is None:
                    info = ops.describe(room, n_events=0)
                    if info is None:
                        raise NotFound(f"room {room!r}: no document")
                    seq = _head_seq(info)
                row["seq"] = seq
                if seq is not None:
                    preview = _room_preview(admin, room, "skip", seq)
                    row.update(changes=preview["changes"], messages=preview["messages"])
                    if preview["changes"] and not dry_run:
                        row["changes"] = ops.skip(room, seq, actor, reason).changed
            else:
                preview = _room_preview(admin, room, action)
                row.update(changes=preview["changes"], messages=preview["messages"])
                if preview["changes"] and not dry_run:
                    done = ops.pause(room, actor, reason) if action == "pause" else ops.resume(room, actor, reason)
                    row["changes"] = done.changed
        except (NotFound, LookupError) as exc:
            row["error"] = str(exc)
        rows.append(row)
    return {"dry_run": dry_run, "action": action, "rooms": sum(1 for r in rows if r["changes"]),
            "messages": sum(r["messages"] for r in rows if r["changes"]), "per_room": rows,
            **({} if dry_run else {"actor": actor})}


def rooms_to(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """The rooms whose message in flight goes to `recipient` (of `provider`,
    else of every enabled provider): the room document's indexed
    `in_flight_to` (`RoomQueries.rooms_sending_to`). Rooms that only queue
    a message for the recipient are not found (the queue is not indexed)."""
    recipient = (args.text("recipient", required=True) or "").strip()
    provider = args.text("provider")
    providers = [provider] if provider else sorted(admin.settings.enabled_providers)
    store = admin.operators.store
    found = {p: store.rooms_sending_to(f"{p}:{recipient}") for p in providers}
    return {"rooms": sorted({r for rooms in found.values() for r in rooms}),
            "by_provider": {p: rooms for p, rooms in found.items() if rooms}}
