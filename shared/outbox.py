"""The room's event outbox: a transaction's delivery events are written into
the room document with the room, so a process that dies between the commit
and its log lines loses no line.

Why: the service commits a room transaction, then logs the decision's events
(shared/service/core.py). A crash in between left the room right (its
`ended` list) and the log without the end, so the analytics
(pipeline/lifecycle.py) called a delivered message lost (the simulation:
255 of 2,000 seeds).

How (no Firestore operation added: the document is written anyway):

- Every room write stores its decision's events in the document's `outbox`
  field, `{write key: [record, ...]}` (`entry`), replacing what was there;
  each event gets the id `"{write key}.{index}"` (`stamped`; the write key is
  `w` and the write id's first characters, `write_key`), the `event_id`
  readers de-duplicate on, per room.
- After the commit the service logs them as before, and notes them as logged
  by this request (`logged`).
- The next transaction on the room (any invocation, the sweep) finds the
  entries left (`left_behind`): those this request did not log itself may
  never have been logged. It logs them *before* its commit
  (`RoomStore.apply` calls `outbox_sink`; `EventLog.emit_again`, a compact
  line, marked `"relogged": true`), so the commit that replaces them
  removes only lines already logged; a crash before it leaves them for the
  next one. A line may so be logged twice, never lost. A read that decides nothing logs only the
  entries about the message it names (`concerning`: the same seq or
  message id), as the redelivery of a request whose process died (a
  duplicate push, status, timer or operator action) does.
- A Messenger or Instagram receipt names only its recipient, and finds
  its rooms by the recipient of their message in flight (`in_flight_to`):
  the redelivery of one whose transaction acked the room's last message
  (the room idle now, `in_flight_to` null) would find no room. So every
  room write stores the receipt it applied, if any (`RECEIPT`, the digest
  of its idempotency key, `receipt_digest`; null otherwise: one field of
  the write made anyway), and the receipt's lookup asks for the rooms
  sending to its recipient OR whose last write applied this very receipt
  (`RoomQueries.rooms_for_receipt`: one query, one read when it finds
  nothing, as before). The store takes the receipt being applied
  (`applying_receipt`, set by shared/service/statuses.py around the room's
  transaction) once, for the transaction that applies it (`receipt_of_write`),
  not for the later ones of its request (a send's outcome). Found again,
  the room's read logs the entries of that write (`of_receipt`): a receipt
  names no seq, the write it made is what it concerns (simulation seed 899).
- The watchdog's sweep is not redelivered: the next sweep (every minute)
  asks for the rooms whose wake-up is overdue, and a room whose last
  message a dead sweep ended (idle, `wake_at_us` null) is not among them
  (simulation seed 57). So a sweep's write that leaves its room idle stores
  when (`SWEPT`, epoch us, the sweep's start, `swept_of_write`; absent from
  every other write, shared/store.py deletes it), each sweep asks, in one
  more query, for the rooms so marked within SWEEP_REREAD_S
  (`recently_swept`, shared/swept_rooms.py) and reads those it did not take
  up (shared/service/timers.py, under `sweeping`), and such a read, which
  decides nothing, logs the entry of the room's last write when a sweep
  made it (`of_sweep`). A sweep that lived has its lines logged again by
  each later sweep of the window (a few copies, `relogged`).
- A blind write the room makes after the lines were logged (the fallback
  acceptance of a WhatsApp send, `RoomStore.record_accepted`) also deletes
  the entries this request logged (`cleared`). Since issue 46 an accepted
  send's acceptance rides on its timer's task instead, so no write follows
  the hand-over's commit: its entries stay until the room's next
  transaction, which logs them again (`"relogged": true`; the pipeline
  keeps one line per (room_id, event_id)).

What it costs: no read or write per message; per sweep run one query
(one read when it finds nothing, https://cloud.google.com/firestore/pricing:
43,200 runs a 30-day month, $0.03 per 100,000 reads, about 1.3 cents a
month) and two reads per room found (its index entry and its read); the bytes of the lines logged a second
time (those no later write cleared: an enqueue into a busy room, a room's
last ack, a hand-over whose send was accepted; 2.16 a message in
`make bench-core`, 2026-11-28 04:20 UTC, 1.10 before the acceptance rode on
the timer), in the sink's
bucket only by default (infra/analytics.tf keeps the `relogged` lines out
of the _Default log bucket; `make cost` prices them per
keep_relogged_events_in_default_bucket), and the entry's bytes in the room document (a few hundred
bytes per event, and 47 bytes of `RECEIPT` with a digest, 14 with null,
inside MAX_ROOM_BYTES' headroom below 1 MiB). Where a room
is allowed that close to Firestore's 1 MiB limit that the entry would cross
it (MAX_ROOM_BYTES up to 1,048,576 is a valid setting), `fitted` writes it
without the entry: the write's lines are logged after its commit as before,
without the outbox's guard against a crash in between, rather than a
document Firestore refuses ("maximum entity size", every write of the room
failing).

Not covered: lines logged outside a room transaction (`sent`,
`send_unknown`, `send_failed`, `timer_arm_failed`, ...) are logged once,
after their call, as before; and an entry of a room no later request ever
reads is never logged again: a room's last transaction, crashed, and never
redelivered. Every caller of baton redelivers an unanswered request, and a
redelivery reads the room: a push, a timer, an operator's action and a
WhatsApp status name their room; a Messenger or Instagram receipt finds it
by `in_flight_to` or by `RECEIPT` (above); where a later write of the room
replaced both, that write's transaction logged the receipt's entry before
its commit (or the receipt's own request had, after its own). The sweep,
not redelivered, is followed by the next, which finds a room it left idle
by `SWEPT` (above); a room it left with a wake-up is read again by that
wake-up's timer or sweep, and written when its message ends. A
redelivery that comes after TTL deleted the idle room (RETENTION_HOURS)
finds nothing; nor does a sweep that comes after SWEEP_REREAD_S (no sweep
ran for that long), or a dead sweep's idle rooms past the SWEEP_BATCH_SIZE
oldest the next sweeps' query returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from shared import docsize
from shared.events import DeliveryEvent, EventType
from shared.opcounts import OpCounts, op_counts
from shared.room import Decision

OUTBOX = "outbox"  # the room document's field
# The room document's field: `receipt_digest` of the receipt its last write
# applied (a Messenger or Instagram receipt by recipient), else null.
# Indexed (Firestore's automatic single-field index, infra/firestore.tf):
# a receipt's lookup asks for it by equality (`RoomQueries.rooms_for_receipt`).
RECEIPT = "last_receipt"
# The room document's field: when (epoch us, the sweep run's start) a
# watchdog sweep made its last write, if that write left the room idle
# (`swept_of_write`); ABSENT from every other write (shared/store.py deletes
# it), so only the few rooms a sweep ended recently are in its automatic
# single-field index, which the next sweeps ask by range (`recently_swept`,
# shared/swept_rooms.py).
SWEPT = "swept_at_us"
WAKE_FIELD = "wake_at_us"  # the room document's wake-up (shared/room_document.py), null when idle
RECEIPT_DIGEST_HEX = 32  # of SHA-256: 128 bits, a fixed 33-byte value however long the receipt's key
ID_CHARS = 12  # of a write key: `w` and 11 hex digits of a uuid4 (44 bits), unique within a room's entries

Sink = Callable[[DeliveryEvent], None]

Message = tuple[str, int, int]  # room id, incarnation, seq


@dataclass
class _Request:
    """What one request (its `op_counts()` object) logged: room id -> write
    keys whose events it logged, and the messages whose `acked` line it
    logged after their commit."""

    counts: OpCounts
    keys: dict[str, set[str]] = field(default_factory=dict)
    acked: set[Message] = field(default_factory=set)


_logged: ContextVar[_Request | None] = ContextVar("baton_outbox_logged", default=None)


@dataclass
class _Receipt:
    """The receipt being applied to one room (`applying_receipt`): its
    digest, and whether a room write has taken it (`receipt_of_write`)."""

    digest: str
    taken: bool = False


_applying: ContextVar[_Receipt | None] = ContextVar("baton_outbox_receipt", default=None)


def _request() -> _Request:
    counts = op_counts()
    current = _logged.get()
    if current is None or current.counts is not counts:
        current = _Request(counts)
        _logged.set(current)
    return current


def _here() -> dict[str, set[str]]:
    return _request().keys


def sink_of(events: Any) -> Sink:
    """The sink of an event log for lines found left: its `emit_again`
    (a compact line, shared/events.py) when it has one, else its `emit`."""
    sink: Sink = getattr(events, "emit_again", events.emit)
    return sink


def write_key(write_id: str) -> str:
    """The key of a write's entry and the prefix of its events' ids: `w` and
    the write id's first characters, a plain Firestore field name (letters,
    digits: `outbox.{key}` is a field path `record_accepted` deletes)."""
    return "w" + write_id[: ID_CHARS - 1]


def stamped(decision: Decision, write_id: str | None, incarnation: int) -> Decision:
    """`decision` with each event given the room's `incarnation` (when it has
    none; 0: unknown) and, when the decision is written (`write_id`), its
    `event_id`."""
    if not decision.events:
        return decision
    key = write_key(write_id) if write_id else None
    events = tuple(replace(e, incarnation=e.incarnation or incarnation or None,
                           event_id=f"{key}.{i}" if key else e.event_id)
                   for i, e in enumerate(decision.events))
    return replace(decision, events=events)


def _record(event: DeliveryEvent) -> dict[str, Any]:
    """The stored form of an event: its set fields only (the id is the entry's key and the index)."""
    body = {k: v for k, v in event.field_values().items() if v is not None and k != "event_id"}
    body["event"] = str(event.event)
    return body


def entry(decision: Decision, write_id: str, carried: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `outbox` field of a room write: this write's events (already
    `stamped`), plus `carried` entries (left behind and not logged by this
    request, when no sink could log them)."""
    out = dict(carried or {})
    if decision.events:
        out[write_key(write_id)] = [_record(e) for e in decision.events]
    return out


def fitted(path: str, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (a room write's fields, with its `outbox` entry) as written:
    unchanged if it fits Firestore's 1 MiB document limit
    (docsize.MAX_DOCUMENT_BYTES, https://cloud.google.com/firestore/quotas#limits),
    else with an empty outbox and no `RECEIPT` (it names the write whose
    entry a receipt's redelivery logs: there is none). `path`: the
    document's path, `rooms/{id}`."""
    if docsize.document_size(path, doc) <= docsize.MAX_DOCUMENT_BYTES:
        return doc
    return {**doc, OUTBOX: {}, **({RECEIPT: None} if RECEIPT in doc else {})}


def _entries(doc: dict[str, Any] | None) -> dict[str, Any]:
    box = (doc or {}).get(OUTBOX)
    return box if isinstance(box, dict) else {}


def left_behind(room_id: str, doc: dict[str, Any] | None) -> dict[str, list[DeliveryEvent]]:
    """The stored room's outbox entries this request did not log itself,
    as events with their ids. A record the code cannot read is skipped (it
    must not stop the room)."""
    mine = _here().get(room_id, set())
    found: dict[str, list[DeliveryEvent]] = {}
    for key, records in _entries(doc).items():
        if key in mine or not isinstance(records, list):
            continue
        events = []
        for i, record in enumerate(records):
            try:
                events.append(DeliveryEvent(**{**record, "event": EventType(record["event"]),
                                               "event_id": f"{key}.{i}"}))
            except (TypeError, ValueError, KeyError):
                continue
        found[key] = events
    return found


def concerning(left: dict[str, list[DeliveryEvent]], events: Iterable[DeliveryEvent]) -> dict[str, list[DeliveryEvent]]:
    """The entries of `left` a read that decides nothing logs: those about
    a message its own events name (the same `seq` or `message_id`). Such a
    read is most often a routine one (a `sent` status, a timer of an earlier
    attempt), and what it finds left is logged by the room's next write;
    but the redelivery of a request whose process died after its commit is
    one too (a duplicate push, status, timer or operator action), and so is
    any later read about that message (an operator's action that is not
    retried: simulation seed 102 lost a `skipped` line when only the same
    component's reads counted)."""
    events = list(events)
    seqs = {e.seq for e in events if e.seq is not None}
    ids = {e.message_id for e in events if e.message_id is not None}
    return {key: found for key, found in left.items()
            if any(e.seq in seqs or (e.message_id is not None and e.message_id in ids) for e in found)}


def log_left_behind(room_id: str, left: dict[str, list[DeliveryEvent]], sink: Sink) -> None:
    """Log what `left_behind` found (before the commit that replaces it),
    each line marked `relogged` (shared/events.py: infra keeps such lines
    out of the _Default log bucket), and note it as logged by this
    request."""
    for events in left.values():
        for event in events:
            sink(replace(event, relogged=True))
    _here().setdefault(room_id, set()).update(left)


def carried(doc: dict[str, Any] | None, left: dict[str, list[DeliveryEvent]]) -> dict[str, Any]:
    """The stored entries of `left` as they were: kept in the next write when no sink logged them."""
    entries = _entries(doc)
    return {key: entries[key] for key in left}


def logged(room_id: str, events: Iterable[DeliveryEvent]) -> None:
    """The service logged these events of `room_id` (after their commit):
    their writes' entries need not be logged again by this request, and a
    later write of this request may delete them (`cleared`)."""
    events = list(events)
    keys = {e.event_id.split(".", 1)[0] for e in events if e.event_id}
    if keys:
        _here().setdefault(room_id, set()).update(keys)
    _request().acked.update((room_id, e.incarnation, e.seq) for e in events if e.event is EventType.ACKED
                            and e.incarnation is not None and e.seq is not None and not e.relogged)


def acked_here() -> frozenset[Message]:
    """The messages (room id, incarnation, seq) whose `acked` line this
    request logged after committing it (`logged`): the acks it applied
    itself (shared/service/webhook.py remembers them for the statuses that
    follow)."""
    return frozenset(_request().acked)


def cleared(room_id: str) -> list[str]:
    """The `outbox` entries (field paths `outbox.{key}`) a write of this
    request to `room_id` may delete: their lines were logged."""
    return [f"{OUTBOX}.{key}" for key in sorted(_here().get(room_id, ()))]


# -- receipts by recipient (the module's docstring: a receipt's redelivery finds its idle room)


def receipt_digest(idempotency_key: str) -> str:
    """The value of the room document's `RECEIPT` field for the receipt of
    this idempotency key (`RecipientReceipt.idempotency_key`: provider,
    recipient, status, watermark and mids, up to ~300 characters): `r` and
    RECEIPT_DIGEST_HEX hex digits of its SHA-256, so the stored field and
    its index entry stay small whatever the receipt's mids."""
    return "r" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:RECEIPT_DIGEST_HEX]


@contextmanager
def applying_receipt(idempotency_key: str) -> Iterator[str]:
    """While the receipt of this idempotency key is applied to one room
    (shared/service/statuses.py, around the room's `apply`): the first room
    transaction of the block stores its digest (`receipt_of_write`). Yields
    the digest."""
    digest = receipt_digest(idempotency_key)
    token = _applying.set(_Receipt(digest))
    try:
        yield digest
    finally:
        _applying.reset(token)


def receipt_of_write() -> str | None:
    """The receipt digest a room transaction starting now stores in
    `RECEIPT` (and whose entry its read logs, `of_receipt`): the receipt's
    being applied (`applying_receipt`), to its first transaction only (the
    later ones of the block, a send's outcome after the receipt's ack, did
    not apply it); None otherwise. The store asks once per transaction, before its
    attempts, so a retried attempt stores it too."""
    current = _applying.get()
    if current is None or current.taken:
        return None
    current.taken = True
    return current.digest


def of_receipt(left: dict[str, list[DeliveryEvent]], doc: dict[str, Any] | None, receipt: str | None,
               write_id_field: str) -> dict[str, list[DeliveryEvent]]:
    """The entries of `left` a read applying receipt `receipt` (a digest)
    logs, beside `concerning`'s: the entry of the room's last write, when
    that write applied this same receipt (the stored `RECEIPT`). A receipt
    names no seq; what it concerns is the write it made, which its dead
    process may not have logged. `write_id_field`: the document's write id
    field (shared/store.py's WRITE_ID), whose `write_key` names the entry."""
    if receipt is None or doc is None or doc.get(RECEIPT) != receipt:
        return {}
    write_id = doc.get(write_id_field)
    key = write_key(write_id) if isinstance(write_id, str) else None
    return {key: left[key]} if key in left else {}


# -- the watchdog's sweep (the module's docstring: the next sweep finds the idle room a dead sweep ended)


@dataclass
class _Sweep:
    """The sweep run in progress (`sweeping`): its start, epoch us."""

    at_us: int


_sweeping: ContextVar[_Sweep | None] = ContextVar("baton_outbox_sweep", default=None)


@contextmanager
def sweeping(at_us: int) -> Iterator[None]:
    """While one watchdog sweep runs (shared/service/timers.py
    `handle_sweep`, started at `at_us`, epoch us): its room writes that
    leave the room with no wake-up store `SWEPT` (`swept_of_write`), and
    its reads that decide nothing log the entry of a room's last write
    when a sweep made it (`of_sweep`). The rescues of a thread pool run in
    copies of the sweep's context, so they see it too."""
    token = _sweeping.set(_Sweep(at_us))
    try:
        yield
    finally:
        _sweeping.reset(token)


def swept_of_write(doc: dict[str, Any]) -> int | None:
    """The `SWEPT` value (epoch us, the sweep's start) of a room write
    whose fields are `doc`, made now: the sweep's start when a sweep makes
    it (`sweeping`) and it leaves the room with nothing to wake it
    (`wake_at_us` null: idle, so no timer, watchdog or redelivery reads it
    again); None otherwise (the field then absent from the document)."""
    current = _sweeping.get()
    if current is None or doc.get(WAKE_FIELD) is not None:
        return None
    return current.at_us


def of_sweep(left: dict[str, list[DeliveryEvent]], doc: dict[str, Any] | None,
             write_id_field: str) -> dict[str, list[DeliveryEvent]]:
    """The entries of `left` a sweep's read that decides nothing logs,
    beside `concerning`'s: the entry of the room's last write, when a sweep
    made it (the stored `SWEPT`) and this read is a sweep's (`sweeping`).
    A sweep is not redelivered: the next one re-reads the rooms earlier
    sweeps left idle (`RoomQueries`' `recently_swept`,
    shared/swept_rooms.py) so that a dead one's lines are logged.
    `write_id_field`: the document's write id field (shared/store.py's
    WRITE_ID), whose `write_key` names the entry."""
    if _sweeping.get() is None or doc is None or not isinstance(doc.get(SWEPT), int):
        return {}
    write_id = doc.get(write_id_field)
    key = write_key(write_id) if isinstance(write_id, str) else None
    return {key: left[key]} if key in left else {}
