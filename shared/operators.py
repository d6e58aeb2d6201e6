"""What an on-call engineer does to a room, as functions over `DeliveryService.apply`.

The admin function (shared/admin/) runs these for the `baton` CLI
(baton_cli/), which is a thin client of that function. Every action is
a room event of the rulebook (shared/room/: `Pause`, `Resume`, `Skip`,
`Redrive`) applied in one transaction like any push or ack, logged as a
delivery event with the operator's identity (`actor`) and `reason`; repeating
an action changes nothing and logs `operator_ignored` with why.

The actions run in the admin function with the deployment's settings
(shared/config.py): the commit, then the timer in Cloud Tasks, then the send
call, exactly as the other functions would. Their event lines go to stdout
(Cloud Logging, under the admin function's service) and to `EVENT_LOG_PATH`
if set; `actor` is the caller's verified identity (shared/admin/identity.py).

Identifiers: a dead letter is named `"{room_id}:{incarnation}:{seq}"`, both
for a message parked in its room (Pub/Sub dead-lettered it) and for one baton
gave up on (kept in `dead_letters/` under that very document id).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from shared.events import DeliveryEvent, EventLog, EventType, JsonLineWriter, utc_iso
from shared.ports import Clock
from shared.room import (
    Pause,
    Redrive,
    Resume,
    RoomState,
    Skip,
    room_phase,
)
from shared.room_document import message_from_doc, room_as_read
from shared.service import DeliveryService, TimerArmFailed
from shared.store import RoomStore

COMPONENT = "operator"
# Cloud Logging's entries.list (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list).
LOGGING_LIST_URL = "https://logging.googleapis.com/v2/entries:list"


# ---------------------------------------------------------------- where the events go


class OperatorEventLog(EventLog):
    """The delivery events of operator actions: written like every function's
    (stdout, where Cloud Logging takes them, and `path` if given), and
    captured per thread while `capture()` is open, so an action's result
    carries the events it caused and no other request's."""

    def __init__(self, path: str = "", stdout: bool = True) -> None:
        super().__init__(path="", keep=False)
        self._writer = JsonLineWriter(path, stdout=stdout)
        self._local = threading.local()

    def emit(self, event: DeliveryEvent) -> None:
        super().emit(event)
        captured = getattr(self._local, "events", None)
        if captured is not None:
            captured.append(event)

    @contextmanager
    def capture(self) -> Iterator[list[DeliveryEvent]]:
        """The events this thread emits until the block ends."""
        captured: list[DeliveryEvent] = []
        self._local.events = captured
        try:
            yield captured
        finally:
            self._local.events = None


class EventSource(Protocol):
    """The last delivery events of a room, for `rooms show` (implemented by
    shared/admin/timeline.py: the local event log and Cloud Logging)."""

    def last_events(self, room_id: str, n: int) -> list[dict[str, Any]]:
        """The room's last `n` delivery events, oldest first, as logged."""
        ...


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class ActionResult:
    """What one operator action did to one room.

    - `changed`: the room's state changed (False: a no-op, `events` say why).
    - `events`: every delivery event the action logged, follow-ups included
      (e.g. `redriven` then `sent`).
    - `error`: set when the commit stood but a later step failed (a timer
      that could not be armed: the watchdog covers the room).
    """

    room_id: str
    action: str
    target: str
    changed: bool
    events: tuple[DeliveryEvent, ...] = ()
    error: str | None = None

    @property
    def outcome(self) -> str:
        """`event` or `event (reason)` of the first event, for a table cell."""
        if not self.events:
            return "nothing held there" if not self.changed else "done"
        first = self.events[0]
        return f"{first.event} ({first.reason})" if first.event == "operator_ignored" else str(first.event)

    def to_json(self) -> dict[str, Any]:
        return {"room_id": self.room_id, "action": self.action, "target": self.target, "changed": self.changed,
                "outcome": self.outcome, "error": self.error,
                "events": [e.to_record() for e in self.events]}


@dataclass(frozen=True)
class DeadLetter:
    """A message waiting for an operator: `parked` in its room (Pub/Sub
    dead-lettered it, or it keeps a refused push's place) or `kept` in
    `dead_letters/` after baton gave up. `status` is where it stands now."""

    id: str
    room_id: str
    incarnation: int
    seq: int
    message_id: str
    kind: str
    reason: str
    attempts: int | None
    since: str
    status: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def dead_letter_id(room_id: str, incarnation: int, seq: int) -> str:
    """The operators' name of a dead letter (the `dead_letters/` document id)."""
    return f"{room_id}:{incarnation}:{seq}"


def parse_dead_letter_id(value: str) -> tuple[str, int, int]:
    """Inverse of `dead_letter_id`.

    Raises:
        ValueError: not `ROOM:INCARNATION:SEQ`.
    """
    room_id, sep, rest = value.rpartition(":")
    room_id, sep2, inc = room_id.rpartition(":")
    if not (sep and sep2 and room_id and inc.isdigit() and rest.isdigit()):
        raise ValueError(f"not a dead letter id (ROOM:INCARNATION:SEQ): {value!r}")
    return room_id, int(inc), int(rest)


# ---------------------------------------------------------------- the actions


class Operators:
    """The operator actions and views over one `DeliveryService`.

    Args:
        service: the delivery service (its store, timers and senders are the
            ones the functions use); its event log should be an
            `OperatorEventLog` so each result can carry its events.
        events: where `describe` reads a room's last events (None: none shown).
        store: the service's store, as Firestore's adapter (shared/store.py):
            the views and actions read its records and queries beyond the
            handlers' port (`shared.ports.RoomStore`); shared/bootstrap.py
            gives it.
        clock: the time of the actions' events and of the views' ages, epoch
            us (`shared.ports.Clock`); None: the service's (`ServiceCore`'s,
            which shared/bootstrap.py gives).
    """

    def __init__(self, service: DeliveryService, events: EventSource | None = None, *, store: RoomStore,
                 clock: Clock | None = None) -> None:
        self.service = service
        self.store = store
        self.event_source = events
        self.clock = service.clock if clock is None else clock

    def now_us(self) -> int:
        """Now, epoch microseconds, by the operators' clock."""
        return self.clock.now_us()

    def _apply(self, room_id: str, event: Any, action: str, target: str) -> ActionResult:
        log = self.service.events
        error = None
        with log.capture() if isinstance(log, OperatorEventLog) else nullcontext(
                log.events if isinstance(log, EventLog) else []) as kept:
            start = len(kept)
            try:
                decision = self.service.apply(room_id, event, COMPONENT)
                changed = decision.state is not None
            except TimerArmFailed as exc:  # committed; the room's stored wake-up brings the watchdog
                changed, error = True, f"committed, but a timer could not be armed ({exc}); the watchdog wakes the room"
            events = tuple(kept[start:])
        return ActionResult(room_id, action, target, changed, events, error)

    def pause(self, room_id: str, actor: str, reason: str) -> ActionResult:
        """Pause a room: it accepts messages and starts none; a message in flight ends normally."""
        return self._apply(room_id, Pause(actor, reason, self.now_us()), "pause", room_id)

    def resume(self, room_id: str, actor: str, reason: str) -> ActionResult:
        """Lift a pause: the head of the queue starts (unless it is parked)."""
        return self._apply(room_id, Resume(actor, reason, self.now_us()), "resume", room_id)

    def skip(self, room_id: str, seq: int, actor: str, reason: str) -> ActionResult:
        """End message `seq` (in flight or queued) as `skipped`; the room moves on."""
        return self._apply(room_id, Skip(seq, actor, reason, self.now_us()), "skip", f"seq {seq}")

    def redrive(self, dl_id: str, actor: str, reason: str) -> ActionResult:
        """Redrive one dead letter by id: a parked message is released in its
        place; a kept one goes back to the head of its room.

        Raises:
            ValueError: a malformed id.
        """
        room_id, incarnation, seq = parse_dead_letter_id(dl_id)
        state = self.store.load_room(room_id)
        if state is not None and state.incarnation == incarnation and any(
                m.seq == seq and m.parked for m in state.pending):
            return self._apply(room_id, Redrive(seq, actor, reason, self.now_us()), "redrive", dl_id)
        kept = self.store.dead_letter(dl_id)
        if kept is None:
            return ActionResult(room_id, "redrive", dl_id, False, (_note(room_id, seq, actor, "no_such_dead_letter", self.now_us()),))
        message = message_from_doc(kept["message"])
        return self._apply(room_id, Redrive(seq, actor, reason, self.now_us(), message, kept["incarnation"]),
                           "redrive", dl_id)

    def redrive_many(self, items: Iterable[DeadLetter], actor: str, reason: str) -> list[ActionResult]:
        """Redrive each dead letter that is still waiting, in seq order per room."""
        waiting = sorted((d for d in items if d.status == "waiting"), key=lambda d: (d.room_id, d.seq))
        return [self.redrive(d.id, actor, reason) for d in waiting]

    def log_statuses_replayed(self, target: str, count: int, actor: str) -> DeliveryEvent:
        """Log that `actor` published `count` messages of the status error
        queue for `target` (a room id, or a recipient key
        `provider:recipient`) again (`baton statuses replay`). No room
        changes here: each status applies in its room when it arrives."""
        event = DeliveryEvent(EventType.STATUSES_REPLAYED, utc_iso(self.now_us()), COMPONENT, target, actor=actor,
                              reason=f"{count} status message(s) replayed from the status error queue")
        self.service.events.emit(event)
        return event

    # ------------------------------------------------------------ views

    def dead_letters(self, room_id: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Parked and kept dead letters, of one room or of all (at most
        `limit` of each kind), oldest first."""
        if room_id is not None:
            doc = self.store.room_doc(room_id)
            rooms = {room_id: doc} if doc else {}
        else:
            rooms, cursor = {}, None
            while len(rooms) < limit:
                page, cursor = self.store.list_rooms("parked", min(500, limit), cursor)
                rooms.update(page)
                if cursor is None:
                    break
        out: list[DeadLetter] = []
        read_at = self.now_us()
        states = {r: room_as_read(r, d, read_at) for r, d in rooms.items()}
        for r, state in states.items():
            for m in state.pending:
                if m.parked:
                    out.append(DeadLetter(dead_letter_id(r, state.incarnation, m.seq), r, state.incarnation, m.seq,
                                          m.message_id, "parked", m.parked, None, utc_iso(m.enqueued_at_us),
                                          "waiting" if m.text is not None else "no body yet"))
        kept = self.store.dead_letters(room_id, limit)
        missing = sorted({d["room_id"] for _, d in kept} - states.keys())
        states.update({r: room_as_read(r, d, read_at) for r, d in self.store.room_docs(missing).items()})
        for dl_id, d in kept:
            m = message_from_doc(d["message"])
            at = d.get("dead_lettered_at")
            since = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if isinstance(at, datetime) else str(at)
            out.append(DeadLetter(dl_id, d["room_id"], d["incarnation"], m.seq, m.message_id, "kept", d["reason"],
                                  d.get("attempts"), since, _kept_status(states.get(d["room_id"]), d, m)))
        out.sort(key=lambda d: d.since)
        return out

    def describe(self, room_id: str, now: int | None = None, n_events: int = 10) -> dict[str, Any] | None:
        """Everything `rooms show` prints about one room, JSON-able; None if
        the room has no document. Times: RFC 3339 UTC; durations in ms."""
        doc = self.store.room_doc(room_id)
        if doc is None:
            return None
        now = self.now_us() if now is None else now
        state = room_as_read(room_id, doc, now)
        return {**room_row(state, doc, now), **_details(state, doc, now),
                "events": self.event_source.last_events(room_id, n_events) if self.event_source else []}

    def list_rooms(self, kind: str, limit: int, cursor: str | None = None, older_than_ms: int = 0,
                   now: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of `rooms list` rows (see `RoomStore.list_rooms`) and the next page's cursor."""
        now = self.now_us() if now is None else now
        rows, next_cursor = self.store.list_rooms(kind, limit, cursor, before_us=now - older_than_ms * 1000)
        return [room_row(room_as_read(r, d, now), d, now) for r, d in rows], next_cursor


def _kept_status(state: RoomState | None, doc: dict[str, Any], m: Any) -> str:
    if state is None or state.incarnation != doc["incarnation"]:
        return "room gone: publish again"
    if m.message_id in state.message_ids():
        return "redriven: queued or in flight"
    last = next((e.outcome for e in reversed(state.ended) if e.message_id == m.message_id), None)
    if last == "dead_lettered":
        return "waiting"
    return f"redriven: {last}" if last else "forgotten by the room: publish again"


def _note(room_id: str, seq: int, actor: str, reason: str, now_us: int) -> DeliveryEvent:
    """An `operator_ignored` line at `now_us` (epoch us) for an action that
    found nothing to apply to (not logged: nothing reached a room)."""
    return DeliveryEvent("operator_ignored", utc_iso(now_us), COMPONENT, room_id,  # type: ignore[arg-type]
                         seq=seq, actor=actor, reason=reason)


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 1)


def room_row(state: RoomState, doc: dict[str, Any], now: int) -> dict[str, Any]:
    """One room as a listing row: phase, in-flight seq.attempt, queue length,
    overdue and head-of-line age (ms), paused/blocked reason."""
    f = state.in_flight
    wake = state.wake_at_us
    head = state.head_since_us
    return {
        "room_id": state.room_id,
        "state": str(room_phase(state)),
        "in_flight": None if f is None else f"{f.message.seq}.{f.attempt}",
        "queued": len(state.pending),
        "overdue_ms": _ms(now - wake) if wake is not None and wake < now else None,
        "head_age_ms": _ms(now - head) if head is not None else None,
        "paused": None if state.paused is None else f"by {state.paused.actor}: {state.paused.reason}",
        "blocked": state.blocked_reason,
    }


def _details(state: RoomState, doc: dict[str, Any], now: int) -> dict[str, Any]:
    f = state.in_flight
    flight = None
    if f is not None:
        deadline = f.deadline_us if f.deadline_us is not None else f.due_at_us
        flight = {
            "seq": f.message.seq, "message_id": f.message.message_id, "attempt": f.attempt, "phase": str(f.phase),
            "age_ms": _ms(now - f.started_at_us), "started_at": utc_iso(f.started_at_us),
            "deadline": utc_iso(deadline), "deadline_in_ms": _ms(deadline - now),
            "wake_at": utc_iso(f.due_at_us), "skipped": f.skipped, "acked_early": f.acked_early,
        }
    expire = doc.get("expire_at")
    return {
        "incarnation": state.incarnation,
        "next_seq": state.next_seq,
        "in_flight_detail": flight,
        "next_ids": [f"{m.seq} {m.message_id}" + (" (parked)" if m.parked else "") for m in state.pending[:5]],
        "awaiting": [mid for mid, _ in state.awaiting],
        "paused_since": None if state.paused is None else utc_iso(state.paused.at_us),
        "counts": dict(state.counts),
        "expire_at": expire.isoformat() if isinstance(expire, datetime) else expire,
    }
