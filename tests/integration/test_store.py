"""The Firestore adapter against the real Firestore emulator."""

from __future__ import annotations

import threading
import time

import pytest
from google.cloud import firestore

from shared import docsize
from shared.room import Enqueue, Policy, Send, SendOutcome, SendReturned, StatusUpdate, decide
from shared.room_document import ROOMS, room_doc_bytes
from shared.shards import ShardCursor, index_shard
from shared.store import DEAD_LETTERS, REJECTED, RoomStore, begin_request, op_counts

POLICY = Policy(ack_timeout_ms=1500, send_timeout_ms=1000)


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project="baton-local"), retention_hours=1)


def enqueue(mid: str) -> Enqueue:
    now = time.time_ns() // 1000
    return Enqueue(mid, "whatsapp", "15550001", f"text of {mid}", now, now)


def apply(store: RoomStore, room: str, event, policy: Policy = POLICY):
    return store.apply(room, lambda s: decide(s, event, policy, "test"))


def delivered(store: RoomStore, room: str, seq: int) -> StatusUpdate:
    now = time.time_ns() // 1000
    return StatusUpdate(store.load_room(room).incarnation, seq, 1, "delivered", now, now, f"wamid.{seq}")


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
    assert room.next_seq == 3 and room.message_ids() == {"m1", "m2"}
    raw = store.room_ref(room_id).get().to_dict()
    # A room that holds messages is never deleted by TTL: no expiry time.
    assert raw["expire_at"] is None and raw["wake_at_us"] == room.in_flight.due_at_us


def test_an_idle_room_gets_its_ttl_expiry_back(store, room_id):
    apply(store, room_id, enqueue("m1"))
    apply(store, room_id, delivered(store, room_id, 1))
    raw = store.room_ref(room_id).get().to_dict()
    assert raw["expire_at"] is not None and raw["wake_at_us"] is None


def test_enqueue_racing_the_last_ack_loses_no_wake_up(store):
    """The users' lost wake-up: a message enqueued while the room's last ack is
    applied must be sent by exactly one of the two requests."""
    decide_calls = []
    for trial in range(15):
        room = f"race-{time.time_ns()}-{trial}"
        apply(store, room, enqueue("m1"))
        ack = delivered(store, room, 1)
        calls = [0]

        def counted(r, event, calls=calls):
            def decide_fn(s):
                calls[0] += 1
                return decide(s, event, POLICY, "test")
            return store.apply(r, decide_fn)

        d_enqueue, d_ack = run_together(lambda r=room: counted(r, enqueue("m2")),
                                        lambda r=room, a=ack: counted(r, a))
        decide_calls.append(calls[0])
        sent = [e.message.seq for d in (d_enqueue, d_ack) for e in d.effects if isinstance(e, Send)]
        assert sent == [2], f"trial {trial}: sends {sent}"
        final = store.load_room(room)
        assert final.in_flight.message.seq == 2 and final.pending == ()
        assert final.counts == {"acked": 1}
    # The race really happened: in some trials one request read the room
    # before the other's commit and had to decide again.
    assert max(decide_calls) > 2, decide_calls


def test_duplicate_acks_at_once_advance_the_room_once(store, room_id):
    for mid in ("m1", "m2", "m3"):
        apply(store, room_id, enqueue(mid))
    ack = delivered(store, room_id, 1)
    decisions = run_together(*[lambda: apply(store, room_id, ack) for _ in range(6)])
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
    d = apply(store, room_id, delivered(store, room_id, 5))  # unknown seq: nothing to write
    assert d.state is None
    assert (op_counts().firestore_reads, op_counts().firestore_writes) == (1, 0)


def test_rejected_pushes_are_kept(store, room_id):
    store.keep_rejected(f"k-{room_id}", "bad data", {"data": "xx"})
    kept = store._db.collection(REJECTED).document(f"k-{room_id}").get().to_dict()
    assert kept["reason"] == "bad data" and kept["data"] == "xx" and kept["expire_at"]


def test_dead_letter_is_committed_with_the_room(store, room_id):
    policy = Policy(ack_timeout_ms=1500, send_timeout_ms=1000, max_send_attempts=1)
    apply(store, room_id, enqueue("m1"), policy)
    room = store.load_room(room_id)
    refused = SendReturned(room.incarnation, 1, 1, SendOutcome.REFUSED, time.time_ns() // 1000, "push:m1",
                           error_code=130429, error_title="throughput")
    d = apply(store, room_id, refused, policy)
    assert [e.event for e in d.events] == ["dead_lettered"]
    kept = store._db.collection(DEAD_LETTERS).document(f"{room_id}:{room.incarnation}:1").get().to_dict()
    assert kept["message"]["text"] == "text of m1" and "refused 1 times" in kept["reason"]
    assert store.load_room(room_id).counts == {"dead_lettered": 1}


def test_a_room_filled_to_the_1_mib_limit_is_accepted_by_firestore_and_refuses_the_next(store, room_id):
    """MAX_ROOM_BYTES at Firestore's own limit: every write the room accepts is
    within 1 MiB by the documented size rules, and the emulator takes it; the
    message that would cross it is refused (503) and awaited, not lost."""
    policy = Policy(ack_timeout_ms=1500, send_timeout_ms=1000, max_room_bytes=docsize.MAX_DOCUMENT_BYTES,
                    room_bytes=room_doc_bytes)
    text = "é" * 4000 + "x" * 96  # 4,096 characters, 8,096 UTF-8 bytes: WhatsApp's longest text
    refused = None
    # Real times: a room whose wake-up were long overdue would be the running
    # watchdog's to re-drive, concurrently with this test.
    now = time.time_ns() // 1000
    for i in range(200):
        d = apply(store, room_id, Enqueue(f"m{i}", "whatsapp", "15550001", text, now, now), policy)
        if d.refused:
            refused = i
            break
    assert refused is not None and refused > 100
    stored = store.room_ref(room_id).get().to_dict()
    stored.pop("expire_at")
    assert docsize.document_size(f"{ROOMS}/{room_id}", stored) <= docsize.MAX_DOCUMENT_BYTES
    room = store.load_room(room_id)
    assert room_doc_bytes(room) <= docsize.MAX_DOCUMENT_BYTES
    assert room.awaiting == ((f"m{refused}", now),) and room.next_seq == refused + 1


def test_a_blind_acceptance_is_applied_at_the_read_and_cleared_by_the_next_write(store, room_id):
    apply(store, room_id, enqueue("m1"))
    apply(store, room_id, enqueue("m2"))
    room = store.load_room(room_id)
    begin_request()
    store.record_accepted(room_id, room.incarnation, 1, 1, 123_456)
    assert (op_counts().firestore_reads, op_counts().firestore_writes) == (0, 1)
    read = store.load_room(room_id)
    assert read.in_flight.phase == "sent" and read.in_flight.deadline_us == 123_456
    raw = store.room_ref(room_id).get().to_dict()
    assert raw["in_flight"]["phase"] == "sending" and raw["accepted"]  # stored as written: applied at the read
    apply(store, room_id, enqueue("m3"))
    raw = store.room_ref(room_id).get().to_dict()
    assert raw["accepted"] == {} and raw["in_flight"]["phase"] == "sent"
    # A room that no longer exists is not created by an acceptance.
    store.record_accepted(f"{room_id}-gone", 1, 1, 1, 1)
    assert store.load_room(f"{room_id}-gone") is None


def test_a_blind_write_between_a_transactions_read_and_commit_makes_it_decide_again_with_the_fact(store, room_id):
    """docs/architecture.md, "Writes outside the transaction": the blind
    write changes the document's update time, the transaction's commit fails
    its precondition, and it reads again: its decision is made on the room
    with the acceptance applied, then clears the map."""
    apply(store, room_id, enqueue("m1"))
    incarnation = store.load_room(room_id).incarnation
    seen: list[str] = []

    def decide_racing(state):
        seen.append(str(state.in_flight.phase))
        if len(seen) == 1:  # another request's blind write lands after this read
            store.record_accepted(room_id, incarnation, 1, 1, 123_456)
        return decide(state, enqueue("m2"), POLICY, "test")

    d = store.apply(room_id, decide_racing)
    assert seen == ["sending", "sent"] and d.state.in_flight.phase == "sent"
    raw = store.room_ref(room_id).get().to_dict()
    assert raw["accepted"] == {} and raw["in_flight"]["phase"] == "sent" and raw["in_flight"]["deadline_us"] == 123_456


def test_a_commit_whose_answer_was_lost_keeps_its_decision_and_effects(store, room_id, monkeypatch):
    """The client library retries a commit that had landed; the retry fails its
    precondition. The store must see its own write (write id) and return the
    committed decision, not decide again on top of it (which would drop the
    decision's send and timer: a stuck room)."""
    from google.api_core import exceptions as gexc
    from google.cloud.firestore_v1.batch import WriteBatch

    apply(store, room_id, enqueue("m1"))
    apply(store, room_id, enqueue("m2"))
    real_commit = WriteBatch.commit
    calls = []

    def commit_then_lose_the_answer(self, *args, **kwargs):
        result = real_commit(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise gexc.FailedPrecondition("injected: the retried commit of a write that landed")
        return result

    monkeypatch.setattr(WriteBatch, "commit", commit_then_lose_the_answer)
    d = apply(store, room_id, delivered(store, room_id, 1))
    monkeypatch.undo()
    assert [e.event for e in d.events] == ["acked"]
    assert [(e.message.seq, e.attempt) for e in d.effects if isinstance(e, Send)] == [(2, 1)]
    room = store.load_room(room_id)
    assert room.counts == {"acked": 1} and room.in_flight.message.seq == 2 and len(calls) == 1


def test_a_commit_that_landed_but_answered_deadline_exceeded_keeps_its_decision(store, room_id, monkeypatch):
    """The caller sees DEADLINE_EXCEEDED for a commit that landed (the client
    library does not retry it): the store reads its write id back and returns
    the committed decision instead of failing the request."""
    from google.api_core import exceptions as gexc
    from google.cloud.firestore_v1.batch import WriteBatch

    apply(store, room_id, enqueue("m1"))
    apply(store, room_id, enqueue("m2"))
    real_commit = WriteBatch.commit

    def commit_then_time_out(self, *args, **kwargs):
        real_commit(self, *args, **kwargs)
        raise gexc.DeadlineExceeded("injected: the commit landed, its answer did not")

    monkeypatch.setattr(WriteBatch, "commit", commit_then_time_out)
    d = apply(store, room_id, delivered(store, room_id, 1))
    monkeypatch.undo()
    assert [e.event for e in d.events] == ["acked"]
    assert [(e.message.seq, e.attempt) for e in d.effects if isinstance(e, Send)] == [(2, 1)]


def test_a_receipt_finds_every_room_sending_to_its_recipient_not_only_the_first_fifty(store, room_id):
    """A Messenger recipient with 60 rooms each holding a message in flight to
    them: all 60 are found (the query used to stop at 50, and the rest never
    saw the receipt: issue 28, item 9)."""
    recipient = str(time.time_ns())[-12:]
    now = time.time_ns() // 1000
    rooms = [f"{room_id}-{i:02d}" for i in range(60)]
    for room in rooms:
        store.apply(room, lambda s: decide(s, Enqueue("m1", "messenger", recipient, "hi", now, now), Policy(), "t"))
    assert sorted(store.rooms_sending_to(f"messenger:{recipient}")) == rooms


def test_the_watchdog_query_asks_every_index_shard_and_merges_oldest_first(stack, room_id):
    """Rooms spread over 8 index shards (shared/shards.py): every write stores
    the room's shard, and `overdue_rooms` answers the most overdue rooms of
    every shard (about limit / shards from each), merged oldest first, and
    never more than the limit; asked again after those are rescued, the next."""
    # A database of its own: the stack's every-second sweep would rescue these
    # overdue rooms in the (default) database and rewrite their shard.
    sharded = RoomStore(firestore.Client(project="baton-local", database="shards-test"), retention_hours=1,
                        index_shards=8)
    long_ago = time.time_ns() // 1000 - 30 * 86400 * 10**6  # older than any other test's rooms
    # 40 rooms, 5 in each of the 8 shards (random ids missed a shard in about 4% of runs)
    candidates = (f"{room_id}-shard-{i:03d}" for i in range(10_000))
    per_shard: dict[int, list[str]] = {}
    for room in candidates:
        per_shard.setdefault(index_shard(room, 8), []).append(room)
        if len(per_shard) == 8 and all(len(v) >= 5 for v in per_shard.values()):
            break
    rooms = sorted(r for v in per_shard.values() for r in v[:5])
    for i, room in enumerate(rooms):
        at = long_ago + (i * 7919 % 40) * 1000  # wake-ups out of the rooms' order
        sharded.apply(room, lambda s, at=at: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", at, at), POLICY, "t"))
    docs = {room: sharded.room_doc(room) for room in rooms}
    assert {doc["shard"] for doc in docs.values()} == set(range(8))  # every shard holds some of them
    begin_request()
    found = sharded.overdue_rooms(long_ago + 86400 * 10**6, 15)
    assert op_counts().firestore_reads >= 8  # one query per shard at least
    assert len(found) == 15 and found == sorted(found, key=lambda r: (docs[r]["wake_at_us"], r))
    by_shard: dict[int, list[str]] = {}
    for room in sorted(rooms, key=lambda r: (docs[r]["wake_at_us"], r)):
        by_shard.setdefault(docs[room]["shard"], []).append(room)
    for shard, ordered in by_shard.items():
        mine = [r for r in found if docs[r]["shard"] == shard]
        assert mine == ordered[:len(mine)], f"shard {shard}: not its most overdue rooms"
    assert len({docs[r]["shard"] for r in found}) == 8  # no shard waits behind another
    # Paged with a cursor, none rescued (as when every one fails): every room
    # once, each page within the limit, then every shard done.
    cursor, paged = ShardCursor(), []
    while page := sharded.overdue_rooms(long_ago + 86400 * 10**6, 15, cursor):
        assert len(page) <= 15
        paged += page
    assert len(paged) == len(set(paged)) and sorted(r for r in paged if r in docs) == rooms
    assert cursor.done == set(range(8))
