"""The room's event outbox (shared/outbox.py) in the real store, against the
Firestore emulator: a write keeps its events in the document, the next
request's transaction logs what it finds left before replacing it, and the
acceptance write deletes what its request logged."""

from __future__ import annotations

import time

import pytest
from google.cloud import firestore

from shared import outbox
from shared.events import DeliveryEvent, EventType
from shared.room import Enqueue, Policy, RecipientReceipt, SendOutcome, SendReturned, WatchdogSweep, decide
from shared.store import RoomStore, begin_request, op_counts

POLICY = Policy(ack_timeout_ms=1500, send_timeout_ms=1000)


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project="baton-local"), retention_hours=1)


def enqueue(store: RoomStore, room: str, mid: str):
    now = time.time_ns() // 1000
    return store.apply(room, lambda s: decide(s, Enqueue(mid, "whatsapp", "15550001", f"text of {mid}", now, now),
                                              POLICY, "test"))


def test_a_write_keeps_its_events_and_the_next_request_logs_them_before_replacing_them(store, room_id):
    logged: list[DeliveryEvent] = []
    store.outbox_sink = logged.append
    try:
        begin_request()  # the request that commits m1, then dies before its lines
        first = enqueue(store, room_id, "m1")
        assert first.events and all(e.event_id and e.incarnation for e in first.events)
        key = first.events[0].event_id.split(".")[0]
        raw = store.room_ref(room_id).get().to_dict()
        assert list(raw[outbox.OUTBOX]) == [key]
        assert [r["event"] for r in raw[outbox.OUTBOX][key]] == [str(e.event) for e in first.events]

        begin_request()  # another request: m2's push
        second = enqueue(store, room_id, "m2")
        assert [(e.event, e.event_id) for e in logged] == [(e.event, e.event_id) for e in first.events]
        raw = store.room_ref(room_id).get().to_dict()
        assert list(raw[outbox.OUTBOX]) == [second.events[0].event_id.split(".")[0]]
    finally:
        store.outbox_sink = None


def test_the_acceptance_write_deletes_the_entries_its_request_logged(store, room_id):
    store.outbox_sink = lambda e: None
    try:
        begin_request()
        d = enqueue(store, room_id, "m1")
        outbox.logged(room_id, d.events)  # as the service after logging them
        room = store.load_room(room_id)
        store.record_accepted(room_id, room.incarnation, 1, 1, 123_456)
        raw = store.room_ref(room_id).get().to_dict()
        assert raw[outbox.OUTBOX] == {} and raw["accepted"]
        assert EventType.ENQUEUED in {e.event for e in d.events}
    finally:
        store.outbox_sink = None


def _messenger_room_acked_by_receipt(store: RoomStore, room: str, psid: str) -> RecipientReceipt:
    """A Messenger room whose only message, sent as `mid.1`, a delivery
    receipt acked (its transaction under `applying_receipt`, as
    shared/service/statuses.py runs it): the room idle. Returns the receipt."""
    now = time.time_ns() // 1000
    store.apply(room, lambda s: decide(s, Enqueue("m1", "messenger", psid, "hi", now, now), POLICY, "test"))
    incarnation = store.load_room(room).incarnation
    store.apply(room, lambda s: decide(s, SendReturned(incarnation, 1, 1, SendOutcome.ACCEPTED, now + 300_000, "c",
                                                       provider_message_id="mid.1"), POLICY, "test"))
    receipt = RecipientReceipt("messenger", psid, "delivered", None, ("mid.1",), now)
    with outbox.applying_receipt(receipt.idempotency_key):
        acked = store.apply(room, lambda s: decide(s, receipt, POLICY, "webhook"))
    assert [e.event for e in acked.events][0] is EventType.ACKED
    return receipt


def test_a_receipts_lookup_is_one_or_query_on_the_emulator(store, room_id):
    """`rooms_for_receipt` (issue 46): `in_flight_to == key OR last_receipt ==
    digest`, one query, on the real emulator. It finds the room sending to
    the recipient and the idle room whose last write applied this receipt,
    not an idle room of another receipt; an unknown receipt finds nothing,
    billed one read as before."""
    psid = f"PSID-{room_id}"
    sending, acked, other = f"{room_id}-s", f"{room_id}-a", f"{room_id}-o"
    now = time.time_ns() // 1000
    store.apply(sending, lambda s: decide(s, Enqueue("m1", "messenger", psid, "hi", now, now), POLICY, "test"))
    receipt = _messenger_room_acked_by_receipt(store, acked, psid)
    _messenger_room_acked_by_receipt(store, other, f"{psid}-2")
    raw = store.room_ref(acked).get().to_dict()
    digest = outbox.receipt_digest(receipt.idempotency_key)
    assert (raw["in_flight_to"], raw[outbox.RECEIPT]) == (None, digest)
    assert sorted(store.rooms_for_receipt(f"messenger:{psid}", digest)) == sorted([sending, acked])
    assert store.rooms_for_receipt(f"messenger:{psid}-3", digest) == [acked]
    assert store.rooms_for_receipt(f"messenger:{psid}", outbox.receipt_digest("another")) == [sending]
    begin_request()
    assert store.rooms_for_receipt(f"messenger:{psid}-3", outbox.receipt_digest("another")) == []
    assert op_counts().firestore_reads == 1


def test_a_receipts_redelivery_logs_the_ack_its_dead_process_left_in_the_idle_room(store, room_id):
    """The receipt's process died after its commit: the redelivery finds the
    idle room by its receipt, and its read (which decides nothing) logs the
    ack's entry before answering; the room is not written."""
    psid = f"PSID-{room_id}"
    begin_request()  # the request that acks m1, then dies before its lines
    receipt = _messenger_room_acked_by_receipt(store, room_id, psid)
    before = store.room_ref(room_id).get().update_time
    logged: list[DeliveryEvent] = []
    store.outbox_sink = logged.append
    try:
        begin_request()  # the platform's redelivery, another process
        digest = outbox.receipt_digest(receipt.idempotency_key)
        assert store.rooms_for_receipt(f"messenger:{psid}", digest) == [room_id]
        with outbox.applying_receipt(receipt.idempotency_key):
            again = store.apply(room_id, lambda s: decide(s, receipt, POLICY, "webhook"))
        assert again.state is None
        assert [(e.event, e.seq, e.relogged) for e in logged] == [(EventType.ACKED, 1, True)]
        assert store.room_ref(room_id).get().update_time == before
    finally:
        store.outbox_sink = None


class _Clock:
    """A clock the test moves (epoch us): the store's `expire_at` and reads."""

    def __init__(self) -> None:
        self.at_us = time.time_ns() // 1000

    def now_us(self) -> int:
        return self.at_us


def _room_a_sweep_ended(store: RoomStore, clock: _Clock, room: str) -> int:
    """A WhatsApp room whose only message, sent on its last attempt and
    accepted, the watchdog times out (its transaction under
    `outbox.sweeping`, as shared/service/timers.py runs it), the process
    logging nothing after: the room idle. Returns the sweep's start (epoch us)."""
    policy = Policy(ack_timeout_ms=1500, send_timeout_ms=1000, max_send_attempts=1)
    now = clock.now_us()
    store.apply(room, lambda s: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", now, now), policy, "test"))
    incarnation = store.load_room(room).incarnation
    store.apply(room, lambda s: decide(s, SendReturned(incarnation, 1, 1, SendOutcome.ACCEPTED, now + 300_000, "c",
                                                       provider_message_id="wamid.1"), policy, "test"))
    clock.at_us += 10 * 60 * 1_000_000  # past its deadline and the watchdog's grace
    started = clock.now_us()
    with outbox.sweeping(started):
        ended = store.apply(room, lambda s: decide(s, WatchdogSweep(started), policy, "sweep"))
    assert EventType.TIMED_OUT in {e.event for e in ended.events}
    return started


def test_a_sweeps_idle_rooms_are_one_range_query_on_the_emulator(stack, room_id):
    """`recently_swept` (issue 46): `swept_at_us >= since`, one query on the
    field's automatic index, on the real emulator: it finds the rooms a
    sweep's write left idle since then, oldest first, up to its limit; a
    room's later write that is not the sweep's drops the field (an update
    deletes it); a query that finds nothing is billed one read."""
    clock = _Clock()
    store = RoomStore(firestore.Client(project="baton-local"), retention_hours=1, clock=clock)
    first, second, plain = f"{room_id}-1", f"{room_id}-2", f"{room_id}-p"
    t1 = _room_a_sweep_ended(store, clock, first)
    t2 = _room_a_sweep_ended(store, clock, second)
    enqueue(store, plain, "m1")
    assert store.room_ref(first).get().to_dict()[outbox.SWEPT] == t1
    assert outbox.SWEPT not in store.room_ref(plain).get().to_dict()
    assert store.recently_swept(t1, 10)[:2] == [first, second]
    assert store.recently_swept(t2, 10)[:1] == [second] and first not in store.recently_swept(t2, 10)
    assert store.recently_swept(t1, 1) == [first]
    now = clock.now_us()
    store.apply(first, lambda s: decide(s, Enqueue("m2", "whatsapp", "15550001", "again", now, now), POLICY, "test"))
    assert outbox.SWEPT not in store.room_ref(first).get().to_dict()
    assert first not in store.recently_swept(t1, 10)
    begin_request()
    assert store.recently_swept(clock.now_us() + 10**12, 10) == []
    assert op_counts().firestore_reads == 1


def test_the_next_sweep_logs_the_end_a_dead_sweep_left_in_the_idle_room(stack, room_id):
    """The sweep's process died after its commit: the next sweep finds the
    idle room by `swept_at_us`, and its read (which decides nothing) logs
    the `timed_out` entry before answering; the room is not written."""
    clock = _Clock()
    store = RoomStore(firestore.Client(project="baton-local"), retention_hours=1, clock=clock)
    begin_request()  # the sweep that times m1 out, then dies before its lines
    started = _room_a_sweep_ended(store, clock, room_id)
    before = store.room_ref(room_id).get().update_time
    logged: list[DeliveryEvent] = []
    store.outbox_sink = logged.append
    try:
        begin_request()  # the next sweep, another process
        clock.at_us += 60_000_000
        assert room_id in store.recently_swept(started, 500)
        with outbox.sweeping(clock.now_us()):
            again = store.apply(room_id, lambda s: decide(s, WatchdogSweep(clock.now_us()), POLICY, "sweep"))
        assert again.state is None
        assert [(e.event, e.seq, e.relogged) for e in logged if e.event is EventType.TIMED_OUT] == [
            (EventType.TIMED_OUT, 1, True)]
        assert store.room_ref(room_id).get().update_time == before
    finally:
        store.outbox_sink = None
