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
from shared.room import Enqueue, Policy, decide
from shared.store import RoomStore, begin_request

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
