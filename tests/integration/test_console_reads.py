"""The console's room list reads no more documents than it shows plus one
page (issue 48, item 6): `RoomStore.list_rooms` over a sharded index, paged
to the end, on the Firestore emulator (a database of its own, so no other
test's rooms are listed)."""

from __future__ import annotations

import time
import uuid

import pytest
from google.cloud import firestore

from shared.room import Enqueue, Policy, decide
from shared.shards import index_shard
from shared.store import RoomStore, begin_request, op_counts

POLICY = Policy(ack_timeout_ms=1500, send_timeout_ms=1000)
PAGE = 20


# 16 shards: one query per page (`shard in [...]`); 40: two groups of 20, merged by the watermark.
@pytest.mark.parametrize("shards", [16, 40])
def test_each_page_of_the_room_list_reads_at_most_what_it_shows_plus_one_page_and_pages_in_order(stack, shards):
    store = RoomStore(firestore.Client(project="baton-local", database=f"console-reads-{uuid.uuid4().hex[:6]}"),
                      retention_hours=1, index_shards=shards, deadline_s=60.0)
    base = time.time_ns() // 1000 - 3600 * 10**6
    rooms = [f"list-{i:04d}" for i in range(150)]
    assert len({index_shard(r, shards) for r in rooms}) >= min(shards, 35)  # (nearly) every shard holds some
    for i, room in enumerate(rooms):
        at = base + (i * 7919 % 150) * 1000  # heads of line out of the rooms' order
        store.apply(room, lambda s, at=at: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", at, at), POLICY, "t"))
    docs = {room: store.room_doc(room) for room in rooms}
    expected = sorted(rooms, key=lambda r: (docs[r]["head_since_us"], r))

    listed, cursor, pages = [], None, 0
    while True:
        begin_request()
        page, cursor = store.list_rooms("lag", PAGE, cursor)
        reads = op_counts().firestore_reads
        pages += 1
        assert reads <= len(page) + PAGE, (pages, reads, len(page))
        if shards <= 30:  # one query: reads exactly what it shows (one if the page is empty)
            assert reads == max(1, len(page)), (pages, reads, len(page))
        listed += [room for room, _ in page]
        if cursor is None:
            break
    assert listed == expected  # every room once, oldest head of line first, across pages
    assert store.count_rooms("lag") == len(rooms)  # one aggregation per group of shards
    assert pages == -(-len(rooms) // PAGE)


def test_the_rooms_sending_from_a_number_are_counted_and_listed_a_page_at_a_time(stack):
    """`in_flight_from` as the store writes it (a room in flight from a number,
    one from another, one with nothing in flight), then counted per number
    and listed by room id, each page reading what it shows."""
    client = firestore.Client(project="baton-local", database=f"console-numbers-{uuid.uuid4().hex[:6]}")
    store = RoomStore(client, retention_hours=1, index_shards=16, deadline_s=60.0)
    rooms = {f"num-{i:03d}": ("111" if i % 3 else "222") for i in range(45)}
    for room, number in rooms.items():
        client.collection("rooms").document(room).set({"in_flight_from": number, "next_seq": 2})
    client.collection("rooms").document("idle").set({"in_flight_from": None, "next_seq": 1})

    begin_request()
    assert store.numbers.count_sending_from(["111", "222", "333"]) == {"111": 30, "222": 15, "333": 0}
    assert op_counts().firestore_reads == 3  # one count aggregation each
    listed, cursor = [], None
    while True:
        begin_request()
        page, cursor = store.numbers.list_sending_from("111", PAGE, cursor)
        assert op_counts().firestore_reads == max(1, len(page))
        listed += [room for room, _ in page]
        if cursor is None:
            break
    assert listed == sorted(r for r, n in rooms.items() if n == "111")
