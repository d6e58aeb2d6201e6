"""No sequential index hotspot on a room document (issue 30, item 5).

Firestore serves about 500 writes/s to a range of an index whose values grow
steadily (https://cloud.google.com/firestore/docs/solutions/shard-timestamp).
Every room write stores its whole document, so any field holding a time
(epoch us) that stays indexed puts every room's writes at the head of one
range. These tests read the room document the code writes (`room_to_doc` of
a room with every field set, plus what `RoomStore` adds) and infra/firestore.tf,
and fail when a time-valued field is left indexed without a shard.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared import outbox
from shared.events import DeliveryEvent, EventType
from shared.room import Decision, Ended, InFlight, Paused, Phase, QueuedMessage, RoomState
from shared.room_document import room_to_doc
from shared.shards import SHARD_FIELD, SHARDED_FIELDS
from tests.infra.test_terraform import INFRA, members, parse, resource

T = 1_795_000_000_000_000  # 2026-11-19, epoch us
DAY_US = 86_400 * 10**6


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    return parse(INFRA)


def full_room() -> dict[str, Any]:
    """The stored document of a room with every field set: a message in
    flight, one queued, one held for its producer sequence, an awaited push,
    a pause, a pace bucket; plus the fields the store adds."""
    msg = QueuedMessage(2, "m2", "whatsapp", "15550001", "hi", T - 5000, T - 4000, sequence=2, attempts=1)
    flight = InFlight(msg, 2, T, Phase.SENT, T + 3_000_000, "req-1", deadline_us=T + 2_000_000,
                      provider_message_id="mid.1", returned_at_us=T + 100, platform_ts_us=T + 50, number="111")
    state = RoomState(
        room_id="room-1", incarnation=T - DAY_US // 2, next_seq=4, in_flight=flight,
        pending=(QueuedMessage(3, "m3", "whatsapp", "15550001", "next", T - 3000, T - 2000),),
        ended=(Ended(1, "m1", "acked"),), awaiting=(("m9", T - 100),), counts={"acked": 1},
        paused=Paused("ops", "maintenance", T + 10), pace_tokens=3.0, pace_at_us=T,
        expected_sequence=3, sequence_held=(QueuedMessage(0, "m5", "whatsapp", "15550001", "later", T, T, sequence=5),),
        gap_due_us=T + 30_000_000)
    # RoomStore.apply adds these (shared/store.py): write_id, shard, the
    # receipt its write applied and, on a sweep's write leaving the room idle,
    # when (shared/outbox.py), expire_at (a timestamp, a
    # TTL field whose index infra/firestore.tf turns off).
    acked = DeliveryEvent(EventType.ACKED, "2026-11-19T00:00:00.000000Z", "webhook", "room-1", seq=1, attempt=1,
                          incarnation=state.incarnation)
    return {**room_to_doc(state), "write_id": "w1", SHARD_FIELD: 7, outbox.RECEIPT: outbox.receipt_digest("receipt:x"),
            outbox.OUTBOX: outbox.entry(Decision(state, events=(acked,)), "w1"), outbox.SWEPT: T}


def time_valued_paths(doc: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of every value within a day of T: a time in epoch us."""
    found: set[str] = set()
    for name, value in doc.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            found |= time_valued_paths(value, path + ".")
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    found |= time_valued_paths(item, path + ".")
                elif isinstance(item, int) and abs(item - T) < DAY_US:
                    found.add(path)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value - T) < DAY_US:
            found.add(path)
    return found


def exempt_fields(tf: dict[str, Any]) -> set[str]:
    exempt = resource(tf, "google_firestore_field", "room_unindexed")
    assert exempt["collection"] == "rooms" and exempt["index_config"] == {}
    return members(exempt["for_each"])


def sharded_indexes(tf: dict[str, Any]) -> set[str]:
    """Fields indexed behind the shard: composite (shard, field) on rooms."""
    index = resource(tf, "google_firestore_index", "room_sharded")
    assert index["collection"] == "rooms" and index["query_scope"] == "COLLECTION"
    fields = index["fields"] if isinstance(index["fields"], list) else [index["fields"]]
    assert [f["field_path"] for f in fields] == [SHARD_FIELD, "${each.value}"]
    return members(index["for_each"])


def test_the_fixture_sets_every_field_of_a_room():
    """A field the fixture leaves null could hold a time unnoticed: a new
    field of the room document must be set here too."""
    doc = full_room()
    # blocked_reason: a text, set only while nothing is in flight.
    assert not [name for name, value in doc.items() if value is None and name != "blocked_reason"]


# Time-valued, indexed without a shard, and why that is no hotspot: written
# by the watchdog's sweep only, on a write that leaves its room idle (the
# field absent from every other write, shared/store.py), so at most at the
# sweep's rate: SWEEP_CONCURRENCY rooms at a time (48 in Terraform, 64 at most), about
# 0.3 s a room in the cloud (docs/scale.md), ~210 writes/s at most after a regional
# incident, below the 500/s of a sequential range; a sweep a minute, 45 s
# at most (SWEEP_BUDGET_S), so two never overlap.
RARE_SEQUENTIAL = {outbox.SWEPT}


def test_no_time_valued_field_of_a_room_is_indexed_without_a_shard(tf):
    exempt, sharded = exempt_fields(tf), sharded_indexes(tf)
    times = time_valued_paths(full_room())
    assert {"wake_at_us", "head_since_us", "incarnation", outbox.SWEPT} <= times  # the check sees times where they are
    unsharded = {p for p in times if p.split(".")[0] not in exempt | RARE_SEQUENTIAL}
    assert not unsharded, f"indexed with near-sequential values and no shard: {sorted(unsharded)}"
    # A field the code queries by shard is indexed behind the shard, and only there.
    assert set(SHARDED_FIELDS) == sharded
    assert set(SHARDED_FIELDS) <= exempt


def test_a_time_field_the_queries_need_is_sharded_not_just_unindexed(tf):
    """The watchdog and the operators' listings query these fields: exempting
    them without the composite index would break the queries on Firestore
    (the emulator serves any query without an index)."""
    assert {"wake_at_us", "head_since_us", "paused_at_us"} <= sharded_indexes(tf)


def test_every_indexed_room_field_is_one_a_query_uses(tf):
    """What stays indexed is what the code queries: `parked` (a count),
    `in_flight_to` (a recipient key), `in_flight_from` (a WhatsApp number:
    the console's counts and list per number), `last_receipt` (a receipt's
    digest: a receipt's lookup, with `in_flight_to`, shared/room_queries.py
    `rooms_for_receipt`), `swept_at_us` (when a sweep's write left the room
    idle: the next sweeps' range query, shared/swept_rooms.py
    `recently_swept`), and the shard-composite fields."""
    indexed = set(full_room()) - exempt_fields(tf)
    assert indexed == {"parked", "in_flight_to", "in_flight_from", outbox.RECEIPT, outbox.SWEPT}


def test_the_sender_window_time_is_not_indexed(tf):
    """`sender_windows.last_us` is written at every WhatsApp send (up to the
    number's rate per second, shared/sender_window.py) and never queried."""
    field = resource(tf, "google_firestore_field", "sender_window_unindexed")
    # shared/sender_window.py's SENDER_WINDOWS (not imported: this venv has no Google client).
    assert (field["collection"], field["field"], field["index_config"]) == ("sender_windows", "last_us", {})
