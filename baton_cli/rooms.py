"""`baton rooms show|list|pause|resume|skip`."""

from __future__ import annotations

import click

from baton_cli.main import Env, command, emit_json, parse_duration_ms, pass_env, show_results, table


@click.group()
def rooms() -> None:
    """One room's state, stuck and lagging rooms, pause/resume/skip."""


@command(rooms, "show")
@click.argument("room")
@click.option("--events", "n_events", default=10, show_default=True, help="how many of the room's last events")
@pass_env
def show(env: Env, room: str, n_events: int, as_json: bool) -> None:
    """State, in-flight message (attempt, age, deadline), queue, pause or block, last events."""
    info = env.call("rooms.show", room=room, events=n_events)  # exit 3 when the room has no document
    if as_json:
        emit_json(info)
        return
    f = info["in_flight_detail"]
    rows = [["state", info["state"]], ["incarnation", info["incarnation"]]]
    if f:
        rows += [["in flight", f"seq {f['seq']} ({f['message_id']}) attempt {f['attempt']}, {f['phase']}"
                  + (", skipped: waits for its send window" if f["skipped"] else "")],
                 ["  age", f"{f['age_ms']:,.0f} ms (started {f['started_at']})"],
                 ["  deadline", f"{f['deadline']} (in {f['deadline_in_ms']:,.0f} ms)"],
                 ["  overdue", f"{info['overdue_ms']:,.0f} ms" if info["overdue_ms"] else "no"]]
    else:
        rows.append(["in flight", "nothing"])
    rows += [["queued", f"{info['queued']} message(s)"],
             ["next", ", ".join(info["next_ids"]) or "-"],
             ["head of line age", f"{info['head_age_ms']:,.0f} ms" if info["head_age_ms"] is not None else "-"],
             ["paused", f"{info['paused']} (since {info['paused_since']})" if info["paused"] else "no"],
             ["blocked", info["blocked"] or "no"]]
    if info["awaiting"]:
        rows.append(["awaiting (refused while full)", ", ".join(info["awaiting"])])
    rows += [["ended", ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items())) or "-"],
             ["expire_at", info["expire_at"] or "never (holds messages or paused)"]]
    env.console.print(table(f"room {room}", ["", ""], rows))
    events = info["events"]
    if events:
        env.console.print(table(f"last {len(events)} event(s)", ["ts", "event", "seq.attempt", "actor", "reason"], [
            [e.get("ts"), e.get("event"),
             f"{e.get('seq')}.{e.get('attempt')}" if e.get("attempt") else e.get("seq"), e.get("actor"),
             e.get("reason") or e.get("status")] for e in events]))


@command(rooms, "list")
@click.option("--stuck", "kind", flag_value="stuck", help="wake-up overdue (the watchdog's query), most overdue first")
@click.option("--lag", "kind", flag_value="lag", help="rooms holding messages, oldest head of line first")
@click.option("--paused", "kind", flag_value="paused", help="paused rooms")
@click.option("--parked", "kind", flag_value="parked", help="rooms with parked messages")
@click.option("--older-than", default="0s", show_default=True, help="with --stuck: overdue by more than this (5m, 30s)")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="the `next` cursor a previous page printed")
@pass_env
def list_rooms(env: Env, kind: str | None, older_than: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """Rooms by a query (never a scan): --stuck, --lag, --paused or --parked; paginated."""
    if kind is None:
        raise click.UsageError("say which rooms: --stuck, --lag, --paused or --parked")
    page = env.call("rooms.list", kind=kind, limit=limit, cursor=cursor, older_than_ms=parse_duration_ms(older_than))
    rows, next_cursor = page["rooms"], page["next"]
    if as_json:
        emit_json({"rooms": rows, "next": next_cursor})
        return
    env.console.print(table(f"{len(rows)} room(s), --{kind}", ["room", "state", "in flight", "queued", "overdue ms",
                                                                 "head age ms", "paused / blocked"], [
        [r["room_id"], r["state"], r["in_flight"], r["queued"], _num(r["overdue_ms"]), _num(r["head_age_ms"]),
         r["paused"] or r["blocked"]] for r in rows]))
    if next_cursor:
        env.console.print(f"next page: --cursor '{next_cursor}'")


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}"


@command(rooms, "pause")
@click.argument("room")
@click.option("--reason", required=True, help="why (logged with your identity)")
@pass_env
def pause(env: Env, room: str, reason: str, as_json: bool) -> None:
    """Pause ROOM: it keeps accepting messages and sends nothing new; a message in flight ends normally."""
    show_results(env, env.call("rooms.pause", room=room, reason=reason), as_json)


@command(rooms, "resume")
@click.argument("room")
@click.option("--reason", default="resumed", show_default=True)
@pass_env
def resume(env: Env, room: str, reason: str, as_json: bool) -> None:
    """Resume a paused ROOM: its head of line starts, in order."""
    show_results(env, env.call("rooms.resume", room=room, reason=reason), as_json)


@command(rooms, "skip")
@click.argument("room")
@click.option("--seq", required=True, type=click.IntRange(1), help="the message's seq (see `rooms show`)")
@click.option("--reason", required=True)
@pass_env
def skip(env: Env, room: str, seq: int, reason: str, as_json: bool) -> None:
    """End message SEQ of ROOM (in flight or queued) as `skipped`; the room moves on."""
    show_results(env, env.call("rooms.skip", room=room, seq=seq, reason=reason), as_json)
