"""Every listing and action of the `baton` CLI, run in the admin function.

Each action is a function `(Admin, Args, actor) -> JSON-able`, listed in
`ACTIONS` under the name the CLI sends (`rooms.pause`, ...). They run with
the deployment's own settings and clients (shared/bootstrap.py): the shard
count, the queues, the topics, the platform tokens never leave Google Cloud.
`actor` is the verified caller (shared/admin/identity.py), written into every
event the action logs.

Errors: `BadRequest` (answered 400) for arguments that are missing or of the
wrong type; `NotFound` (404) for a room, dead letter or rejected push that
does not exist. Every changing action takes `dry_run` (bulk ones:
`dead_letters.redrive` with `room` or `all`, `statuses.replay`,
`rejects.replay`; and `rooms.pause|resume|skip`, `scheduled.cancel`,
`pause.all`, `resume.all`, which the console previews before its confirm):
then it returns what it would touch (`rooms`, `messages`) and changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shared.admin.incident import IncidentSwitch
from shared.admin.outcomes import outcomes_list, outcomes_replay
from shared.admin.overview import activity_ended, activity_recent
from shared.admin.queues import scheduled_cancel, scheduled_list, statuses_list, statuses_replay
from shared.operators import Operators, parse_dead_letter_id


class BadRequest(ValueError):
    """A malformed admin request (answered 400)."""


class NotFound(LookupError):
    """What the request names does not exist (answered 404)."""


@dataclass
class Admin:
    """What the actions use: the operator views and actions over the
    deployment's `DeliveryService`, its settings and the incident switch;
    `error_queue` and `scheduled` are built on first use (their clients)."""

    operators: Operators
    settings: Any
    incident: IncidentSwitch
    error_queue_factory: Callable[[], Any]
    scheduled_factory: Callable[[], Any]
    publisher_factory: Callable[[], Any]


class Args:
    """The request's `args` object, read with checks (each raises BadRequest)."""

    def __init__(self, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise BadRequest("`args` must be an object")
        self.raw = raw

    def text(self, name: str, required: bool = False, default: str | None = None) -> str | None:
        value = self.raw.get(name, default)
        if value is None:
            if required:
                raise BadRequest(f"`{name}` is required")
            return None
        if not isinstance(value, str) or (required and not value.strip()):
            raise BadRequest(f"`{name}` must be a non-empty string")
        return value

    def number(self, name: str, default: int, low: int = 0, high: int = 1_000_000) -> int:
        value = self.raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadRequest(f"`{name}` must be a whole number from {low} to {high}")
        return value

    def flag(self, name: str) -> bool:
        value = self.raw.get(name, False)
        if not isinstance(value, bool):
            raise BadRequest(f"`{name}` must be true or false")
        return value


def _results(results: list[Any]) -> list[dict[str, Any]]:
    return [r.to_json() for r in results]


# ---------------------------------------------------------------- the deployment


def settings(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """The deployment's settings, secrets left out (the CLI shows and uses them)."""
    from shared.config import SECRET_ENV_VARS

    hidden = {n.lower() for n in SECRET_ENV_VARS}
    return {k: v for k, v in asdict(admin.settings).items() if k not in hidden}


def status(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """The overview of `baton status` (shared/admin/overview.py)."""
    from shared.admin.overview import overview

    return overview(admin, with_error_queue=not args.flag("skip_error_queue"))


def _incident_preview(admin: Admin, on: bool) -> dict[str, Any]:
    """What switching the incident switch to `on` would touch: every room holding messages."""
    store = admin.operators.store
    current = admin.incident.read()
    holding = store.count_rooms("lag") if current.on != on else 0
    return {"dry_run": True, "rooms": holding, "messages": holding, "incident": current.to_json(),
            "changes": current.on != on}


def pause_all(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Turn the incident switch on: no new send anywhere (shared/admin/incident.py);
    `dry_run`: the rooms holding messages it would hold (none if already on)."""
    if args.flag("dry_run"):
        return _incident_preview(admin, True)
    incident, changed = admin.incident.set(True, actor, args.text("reason", required=True) or "")
    return {"incident": incident.to_json(), "changed": changed}


def resume_all(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Turn the incident switch off: held rooms send again within about 20 s, each in order;
    `dry_run`: the rooms holding messages it would release (none if already off)."""
    if args.flag("dry_run"):
        return _incident_preview(admin, False)
    incident, changed = admin.incident.set(False, actor, args.text("reason", default="resumed") or "resumed")
    return {"incident": incident.to_json(), "changed": changed}


# ---------------------------------------------------------------- rooms


def rooms_show(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    room = args.text("room", required=True) or ""
    info = admin.operators.describe(room, n_events=args.number("events", 10, 0, 1000))
    if info is None:
        raise NotFound(f"room {room!r}: no document (never used, or deleted by TTL after being idle)")
    return info


def rooms_list(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    kind = args.text("kind", required=True) or ""
    try:
        rows, cursor = admin.operators.list_rooms(kind, args.number("limit", 50, 1, 1000), args.text("cursor"),
                                                  args.number("older_than_ms", 0, 0, 10**12))
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    return {"rooms": rows, "next": cursor}


def rooms_find(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """The rooms whose delivery events name message id `message_id` (at most
    `limit`, most recent first), from the delivery event log
    (shared/admin/timeline.py); a message id is unique per room only."""
    message_id = args.text("message_id", required=True) or ""
    source = admin.operators.event_source
    found = source.rooms_with_message(message_id, args.number("limit", 20, 1, 100)) if source is not None and \
        hasattr(source, "rooms_with_message") else []
    return {"message_id": message_id, "rooms": found}


def rooms_timeline(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Room `room`'s last `limit` delivery events, and one row per message
    (shared/admin/timeline.py, `timeline`)."""
    from shared.admin.timeline import timeline

    room = args.text("room", required=True) or ""
    source = admin.operators.event_source
    events = source.last_events(room, args.number("limit", 200, 1, 5000)) if source is not None else []
    return {"room_id": room, **timeline(events)}


def _room_preview(admin: Admin, room: str, action: str, seq: int | None = None) -> dict[str, Any]:
    """What a room action would touch (its dry run): the room (none if a
    pause finds it paused already, or a resume not paused) and its messages
    held (queued and in flight), or message `seq` alone for a skip.

    Raises:
        NotFound: the room has no document.
    """
    info = admin.operators.describe(room, n_events=0)
    if info is None:
        raise NotFound(f"room {room!r}: no document (never used, or deleted by TTL after being idle)")
    flight = info.get("in_flight_detail")
    held = info["queued"] + (1 if flight else 0)
    if seq is not None:
        queued = {int(n.split(" ", 1)[0]) for n in info.get("next_ids") or []}
        held = int(seq in queued or (flight is not None and flight["seq"] == seq) or info["queued"] > len(queued))
    changes = {"pause": info["paused"] is None, "resume": info["paused"] is not None}.get(action, bool(held))
    return {"dry_run": True, "action": action, "room_id": room, "rooms": int(changes),
            "messages": held if changes else 0, "changes": changes, "state": info["state"],
            "in_flight": info["in_flight"], "paused": info["paused"]}


def rooms_pause(admin: Admin, args: Args, actor: str) -> Any:
    room, reason = args.text("room", required=True) or "", args.text("reason", required=True) or ""
    if args.flag("dry_run"):
        return _room_preview(admin, room, "pause")
    return _results([admin.operators.pause(room, actor, reason)])


def rooms_resume(admin: Admin, args: Args, actor: str) -> Any:
    room = args.text("room", required=True) or ""
    if args.flag("dry_run"):
        return _room_preview(admin, room, "resume")
    return _results([admin.operators.resume(room, actor, args.text("reason", default="resumed") or "resumed")])


def rooms_skip(admin: Admin, args: Args, actor: str) -> Any:
    room, reason = args.text("room", required=True) or "", args.text("reason", required=True) or ""
    seq = args.number("seq", 0, 1, 10**12)
    if args.flag("dry_run"):
        return _room_preview(admin, room, "skip", seq)
    return _results([admin.operators.skip(room, seq, actor, reason)])


# ---------------------------------------------------------------- dead letters


def dead_letters_list(admin: Admin, args: Args, actor: str) -> list[dict[str, Any]]:
    return [d.to_json() for d in admin.operators.dead_letters(args.text("room"), args.number("limit", 100, 1, 5000))]


def dead_letters_redrive(admin: Admin, args: Args, actor: str) -> Any:
    """One dead letter by `id`, or every waiting one of `room`, or of `all`
    rooms (at most `limit`); `dry_run`: what it would redrive."""
    dl_id, room, every = args.text("id"), args.text("room"), args.flag("all")
    if sum((dl_id is not None, room is not None, every)) != 1:
        raise BadRequest("give exactly one of `id`, `room` or `all`")
    reason = args.text("reason", required=True) or ""
    ops = admin.operators
    if dl_id is not None:
        try:
            parse_dead_letter_id(dl_id)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return _results([ops.redrive(dl_id, actor, reason)])
    waiting = [d for d in ops.dead_letters(room, args.number("limit", 1000, 1, 5000)) if d.status == "waiting"]
    if args.flag("dry_run"):
        return {"dry_run": True, "rooms": len({d.room_id for d in waiting}), "messages": len(waiting),
                "ids": [d.id for d in waiting]}
    return _results(ops.redrive_many(waiting, actor, reason))


# ---------------------------------------------------------------- rejected pushes


def rejects_list(admin: Admin, args: Args, actor: str) -> list[dict[str, Any]]:
    return [{"id": key, **doc} for key, doc in admin.operators.store.rejected(args.number("limit", 50, 1, 5000))]


def _attributes(doc: dict[str, Any], fixes: Any) -> dict[str, str]:
    attributes = doc.get("attributes") or {}
    if isinstance(attributes, str):  # kept as JSON text when it was not a string map
        try:
            attributes = json.loads(attributes)
        except ValueError:
            attributes = {}
    out = {str(k): str(v) for k, v in (attributes if isinstance(attributes, dict) else {}).items()}
    if not isinstance(fixes, dict) or not all(isinstance(v, str) for v in fixes.values()):
        raise BadRequest("`attrs` must be an object of strings")
    out.update(fixes)
    return out


def rejects_replay(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """Publish rejected push `id` again, once, with `attrs` fixes, to `topic`
    (default PUBSUB_TOPIC); `dry_run`: what would be published."""
    reject_id = args.text("id", required=True) or ""
    store = admin.operators.store
    doc = store.rejected_one(reject_id)
    if doc is None:
        raise NotFound(f"no rejected push {reject_id!r}")
    attributes = _attributes(doc, args.raw.get("attrs") or {})
    topic = args.text("topic") or admin.settings.pubsub_topic
    result: dict[str, Any] = {"id": reject_id, "replayed": False, "attributes": attributes}
    if args.flag("dry_run"):
        already = bool(doc.get("replayed_at"))
        return {**result, "dry_run": True, "rooms": 0 if already else 1, "messages": 0 if already else 1,
                "topic": topic}
    try:
        data = base64.b64decode(doc.get("data") or "", validate=True)
    except (binascii.Error, ValueError):
        data = str(doc.get("data") or "").encode()
    if not store.claim_replay(reject_id, actor):
        result["reason"] = f"already replayed at {doc.get('replayed_at')} by {doc.get('replayed_by')}"
        return result
    client = admin.publisher_factory()
    path = client.topic_path(admin.settings.project, topic)
    try:
        published = client.publish(path, data, ordering_key=attributes.get("room_id", ""),
                                   **attributes).result(timeout=60)
    except Exception:
        store.finish_replay(reject_id, None)
        raise
    store.finish_replay(reject_id, published)
    result.update(replayed=True, published_as=published, topic=path, actor=actor)
    return result


def rooms_bulk(admin: Admin, args: Args, actor: str) -> Any:
    """`rooms.bulk`: one room action on many rooms (shared/admin/bulk.py, which builds on this module)."""
    from shared.admin.bulk import rooms_bulk as run

    return run(admin, args, actor)


def rooms_to(admin: Admin, args: Args, actor: str) -> Any:
    """`rooms.to`: the rooms with a message in flight to a recipient (shared/admin/bulk.py)."""
    from shared.admin.bulk import rooms_to as run

    return run(admin, args, actor)


def rooms_from(admin: Admin, args: Args, actor: str) -> Any:
    """`rooms.from`: the rooms sending from one WhatsApp number (shared/admin/numbers.py)."""
    from shared.admin.numbers import rooms_from as run

    return run(admin, args, actor)


ACTIONS: dict[str, Callable[[Admin, Args, str], Any]] = {
    "settings": settings,
    "status": status,
    "activity.recent": activity_recent,
    "activity.ended": activity_ended,
    "pause.all": pause_all,
    "resume.all": resume_all,
    "rooms.show": rooms_show,
    "rooms.list": rooms_list,
    "rooms.find": rooms_find,
    "rooms.timeline": rooms_timeline,
    "rooms.to": rooms_to,
    "rooms.from": rooms_from,
    "rooms.bulk": rooms_bulk,
    "rooms.pause": rooms_pause,
    "rooms.resume": rooms_resume,
    "rooms.skip": rooms_skip,
    "dead_letters.list": dead_letters_list,
    "dead_letters.redrive": dead_letters_redrive,
    "rejects.list": rejects_list,
    "rejects.replay": rejects_replay,
    "statuses.list": statuses_list,
    "statuses.replay": statuses_replay,
    "scheduled.list": scheduled_list,
    "scheduled.cancel": scheduled_cancel,
    "outcomes.list": outcomes_list,
    "outcomes.replay": outcomes_replay,
}
# Actions that change something: their audit line is written at the warning level.
CHANGING = frozenset({"pause.all", "resume.all", "rooms.pause", "rooms.resume", "rooms.skip", "rooms.bulk",
                      "dead_letters.redrive", "rejects.replay", "statuses.replay", "scheduled.cancel", "outcomes.replay"})
