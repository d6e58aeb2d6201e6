"""`baton scheduled list|cancel`: messages published with `deliver_at` or
`delay_s` that wait, outside their rooms, for their time (shared/scheduled.py)."""

from __future__ import annotations

from dataclasses import asdict

import click

from baton_cli.main import Env, command, emit_json, pass_env, table


def _hold(env: Env):  # noqa: ANN202 - a ScheduledHold, imported late to keep `baton --help` fast
    from shared.scheduled import ScheduledHold
    from shared.tasks import make_client

    return ScheduledHold(make_client(env.settings), env.settings)


@click.group()
def scheduled() -> None:
    """Scheduled messages: list what waits for its time, cancel one before it."""


@command(scheduled, "list")
@click.option("--room", help="only this room's messages")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@pass_env
def list_scheduled(env: Env, room: str | None, limit: int, as_json: bool) -> None:
    """What waits, earliest first, with when it enters its room (UTC)."""
    from shared.events import utc_iso

    waiting = _hold(env).list(room, limit)
    if as_json:
        emit_json([{**asdict(m), "deliver_at": utc_iso(m.deliver_at_us)} for m in waiting])
        return
    env.console.print(table(f"{len(waiting)} scheduled message(s)", ["room", "message", "enters at", "task"],
                            [[m.room_id, m.message_id, utc_iso(m.deliver_at_us), m.task] for m in waiting]))


@command(scheduled, "cancel")
@click.argument("room_id")
@click.argument("message_id")
@click.option("--reason", required=True, help="why (kept with the cancellation and logged)")
@pass_env
def cancel(env: Env, room_id: str, message_id: str, reason: str, as_json: bool) -> None:
    """Cancel room ROOM_ID's scheduled message MESSAGE_ID: when its time comes it ends as `skipped` instead of
    entering its room. Its task is deleted too, by the name its hold recorded, where Cloud Tasks allows it.
    Other rooms' messages with the same id are not touched (a message id is unique per room only)."""
    import time

    from google.cloud import firestore

    from shared.store import RoomStore

    s = env.settings
    store = RoomStore(firestore.Client(project=s.project, database=s.firestore_database), s.retention_hours,
                      index_shards=s.index_shards)
    recorded = store.cancel_scheduled(room_id, message_id, env.who, reason)
    task = (recorded or {}).get("task")
    deleted = _hold(env).delete(task) if task else False
    waiting = bool(recorded) and (recorded.get("deliver_at_us") or 0) > time.time_ns() // 1000
    result = {"room_id": room_id, "message_id": message_id, "was_waiting": waiting, "task": task, "task_deleted": deleted,
              "actor": env.who}
    if as_json:
        emit_json(result)
    else:
        env.console.print(table(f"scheduled message cancelled by {env.who}", ["", ""],
                                [[k, v] for k, v in result.items()]))
