"""The admin API's actions on the two queues beside the rooms: the status
error queue (`statuses.list`, `statuses.replay`; shared/admin/error_queue.py)
and the scheduled messages (`scheduled.list`, `scheduled.cancel`;
shared/scheduled.py). Registered in shared/admin/actions.py's `ACTIONS`,
with its `Admin` and `Args`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from shared.events import utc_iso

if TYPE_CHECKING:
    from shared.admin.actions import Admin, Args


# ---------------------------------------------------------------- the status error queue


def statuses_list(admin: Admin, args: Args, actor: str) -> list[dict[str, Any]]:
    records = admin.error_queue_factory().list(args.text("room"), args.number("limit", 1000, 1, 100_000))
    return [asdict(r) for r in records]


def statuses_replay(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Publish the error queue's statuses again (shared/admin/error_queue.py),
    logging `statuses_replayed` with the actor per room or recipient, also
    for what was published before a failure (which still fails the request);
    `dry_run`: what it would replay."""
    room, limit = args.text("room"), args.number("limit", 1000, 1, 100_000)
    queue = admin.error_queue_factory()
    if args.flag("dry_run"):
        records = [r for r in queue.list(room, limit) if r.target is not None]
        return {"dry_run": True, "rooms": len({r.target for r in records}), "messages": len(records),
                "statuses": sum(r.statuses for r in records)}
    replayed: Counter[str] = Counter()
    try:
        counts = queue.replay(room, limit, on_replayed=lambda target: replayed.update([target]))
    finally:  # what was published before a failure is logged too, and that failure still raises
        log_replays(admin.operators, replayed, actor)
    return {**counts, "actor": actor}


def log_replays(operators: Any, replayed: Counter[str], actor: str) -> list[str]:
    """Log `statuses_replayed` per target; a line that cannot be written does
    not hide the others. Returns what could not be logged."""
    missing = []
    for target, n in sorted(replayed.items()):
        try:
            operators.log_statuses_replayed(target, n, actor)
        except Exception as exc:  # noqa: BLE001 - the replay's own outcome matters more; say what is missing
            missing.append(f"{target} ({n}): {exc}")
    return missing


# ---------------------------------------------------------------- scheduled messages


def scheduled_list(admin: Admin, args: Args, actor: str) -> list[dict[str, Any]]:
    waiting = admin.scheduled_factory().list(args.text("room"), args.number("limit", 1000, 1, 1_000_000))
    return [{**asdict(m), "deliver_at": utc_iso(m.deliver_at_us)} for m in waiting]


def scheduled_cancel(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Cancel room `room_id`'s scheduled message `message_id` (shared/scheduled.py); other rooms' messages
    with the same id are not touched (a message id is unique per room only)."""
    room_id, message_id = args.text("room_id", required=True) or "", args.text("message_id", required=True) or ""
    reason = args.text("reason", required=True) or ""
    if args.flag("dry_run"):
        waiting = [m for m in admin.scheduled_factory().list(room_id, 10_000) if m.message_id == message_id]
        return {"dry_run": True, "room_id": room_id, "message_id": message_id, "rooms": len(waiting[:1]),
                "messages": len(waiting[:1]), "deliver_at": utc_iso(waiting[0].deliver_at_us) if waiting else None}
    recorded = admin.operators.store.cancel_scheduled(room_id, message_id, actor, reason)
    # A copy let in already (`entered_at`): too late; its task may be retrying a full room, so it stays.
    task = None if (recorded or {}).get("entered_at") is not None else (recorded or {}).get("task")
    # A held message ends now, before its task is deleted: a deleted task brings nothing at its time, and
    # a cancel that dies between the two leaves the task to come, find the end and log it again (relogged).
    now_us = admin.operators.now_us()
    ended = admin.operators.service.end_cancelled_scheduled(room_id, message_id, now_us) if task else "not_held"
    deleted = admin.scheduled_factory().delete(task) if task else False
    was_waiting = recorded is not None and (recorded.get("deliver_at_us") or 0) > now_us
    return {"room_id": room_id, "message_id": message_id, "was_waiting": was_waiting, "task": task,
            "ended_now": ended == "ended_now", "task_deleted": deleted, "actor": actor}
