"""The Firestore adapter against the real Firestore emulator."""

from __future__ import annotations

import threading
import time

import pytest
from google.cloud import firestore

from shared.room import Enqueue, Policy, Send, StatusUpdate, decide
from shared.store import DEAD_LETTERS, REJECTED, RoomStore, begin_request, op_counts

POLICY = Policy(ack_timeout_ms=1500)


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project="baton-local"), retention_hours=1)


def enqueue(mid: str) -> Enqueue:
    now = time.time_ns() // 1000
    return Enqueue(mid, "whatsapp", "15550001", f"text of {mid}", now, now)


def delivered(seq: int) -> StatusUpdate:
    now = time.time_ns() // 1000
    return StatusUpdate(seq, 1, "delivered", now, now, f"wamid.{seq}")


def apply(store: RoomStore, room: str, event):
    return store.apply(room, lambda s: decide(s, event, POLICY, "test"))


def run_together(*fns):
    """Run the callables at the same moment in threads; return their results."""
    barrier = threading.Barrier(len(fns))
    results: list = [None] * len(fns)

    def worker(i, fn):
        barrier.wait()
        results[i] = fn()

    threads = [threading.Thread(target=worker, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_a_room_round_trips_through_its_document(store, room_id):
    apply(store, room_id, enqueue("m1"))
    apply(store, room_id, enqueue("m2"))
    room = store.load_room(room_id)
    assert room.in_flight.message.message_id == "m1"
    assert [m.message_id for m in room.pending] == ["m2"]
    assert room.next_seq == 3 and room.recent_ids == ("m1", "m2")
    raw = store.room_ref(room_id).get().to_dict()
    assert raw["expire_at"] is not None  # the TTL field


def test_enqueue_racing_the_last_ack_loses_no_wake_up(store):
    """The users' lost wake-up: a message enqueued while the room's last ack is
    applied must be sent by exactly one of the two requests."""
    for trial in range(15):
        room = f"race-{time.time_ns()}-{trial}"
        apply(store, room, enqueue("m1"))
        d_enqueue, d_ack = run_together(lambda r=room: apply(store, r, enqueue("m2")),
                                        lambda r=room: apply(store, r, delivered(1)))
        sent = [e.message.seq for d in (d_enqueue, d_ack) for e in d.effects if isinstance(e, Send)]
        assert sent == [2], f"trial {trial}: sends {sent}"
        final = store.load_room(room)
        assert final.in_flight.message.seq == 2 and final.pending == ()
        assert final.counts == {"acked": 1}


def test_duplicate_acks_at_once_advance_the_room_once(store, room_id):
    for mid in ("m1", "m2", "m3"):
        apply(store, room_id, enqueue(mid))
    decisions = run_together(*[lambda: apply(store, room_id, delivered(1)) for _ in range(6)])
    acked = [e for d in decisions for e in d.events if e.event == "acked"]
    assert len(acked) == 1
    room = store.load_room(room_id)
    assert room.in_flight.message.seq == 2 and [m.seq for m in room.pending] == [3]


def test_concurrent_first_messages_of_a_new_room_get_distinct_seqs(store, room_id):
    d1, d2 = run_together(lambda: apply(store, room_id, enqueue("a")), lambda: apply(store, room_id, enqueue("b")))
    seqs = sorted(e.seq for d in (d1, d2) for e in d.events if e.event == "enqueued")
    assert seqs == [1, 2]
    assert store.load_room(room_id).next_seq == 3


def test_happy_path_costs_one_read_and_one_write_per_transition(store, room_id):
    begin_request()
    apply(store, room_id, enqueue("m1"))
    assert (op_counts().firestore_reads, op_counts().firestore_writes) == (1, 1)
    begin_request()
    d = apply(store, room_id, delivered(5))  # unknown seq: nothing to write
    assert d.state is None
    assert (op_counts().firestore_reads, op_counts().firestore_writes) == (1, 0)


def test_receipts_and_kept_records(store, room_id):
    from datetime import UTC, datetime

    assert not store.has_receipt(room_id, 1, 1)
    store.write_receipt(room_id, 1, 1, "wamid.X", datetime.now(UTC))
    assert store.has_receipt(room_id, 1, 1)
    assert not store.has_receipt(room_id, 1, 2)
    store.keep_rejected(f"k-{room_id}", "bad data", {"data": "xx"})
    kept = store._db.collection(REJECTED).document(f"k-{room_id}").get().to_dict()
    assert kept["reason"] == "bad data" and kept["data"] == "xx" and kept["expire_at"]


def test_dead_letter_is_committed_with_the_room(store, room_id):
    from shared.room import Receipt, TimerFired, TimerKind

    policy = Policy(ack_timeout_ms=1500, max_send_attempts=1)
    store.apply(room_id, lambda s: decide(s, enqueue("m1"), policy, "test"))
    fired = TimerFired(1, 1, TimerKind.ACK_TIMEOUT, time.time_ns() // 1000, Receipt.MISSING)
    d = store.apply(room_id, lambda s: decide(s, fired, policy, "test"))
    assert [e.event for e in d.events] == ["dead_lettered"]
    kept = store._db.collection(DEAD_LETTERS).document(f"{room_id}:1").get().to_dict()
    assert kept["message"]["text"] == "text of m1" and "no confirmed send" in kept["reason"]
    assert store.load_room(room_id).counts == {"dead_lettered": 1}
