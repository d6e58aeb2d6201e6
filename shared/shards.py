"""Index shards of a room document: no sequential index hotspot.

Firestore serves about 500 writes/s to one range of an index whose values
grow steadily (timestamps), per collection: "If a collection contains
documents with sequential indexed values, Cloud Firestore limits the write
rate to 500 writes per second"
(https://cloud.google.com/firestore/docs/solutions/shard-timestamp). A room
rewrites its wake-up time (`wake_at_us`) two or three times per message and
its head-of-line time (`head_since_us`) once; unsharded, every room's writes
land at the head of one index range and the whole deployment stops near
170 messages/s.

So each time-valued field a query needs is indexed only behind a shard: the
room document carries `shard`, a stable hash of its room id modulo
INDEX_SHARDS, and infra/firestore.tf keeps a composite index
(`shard` ascending, field ascending) for each of `SHARDED_FIELDS` while
exempting the field's own single-field index. A query then asks each shard
(`shard == i`, range on the field) and merges: INDEX_SHARDS ranges, each
taking its own 500 writes/s. Every other time-valued field of a room is not
indexed at all (tests/infra check both against the code).

Raising INDEX_SHARDS is safe (a room's next write moves it to its new shard,
and queries ask every shard below the new count, old ones included);
lowering it hides the rooms in the dropped shards from the watchdog until
they are written again, so Terraform refuses nothing but docs/scale.md says:
raise only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

# The room document's shard field, and the time-valued fields indexed behind it.
SHARD_FIELD = "shard"
SHARDED_FIELDS = ("wake_at_us", "head_since_us", "paused_at_us")


def index_shard(room_id: str, shards: int) -> int:
    """The shard (0 .. `shards` - 1) of a room: the first 8 hex digits of the
    SHA-256 of its id, modulo `shards`. Stable across processes and versions
    (Python's own `hash` of a str is salted per process).

    Raises:
        ValueError: `shards` is below 1.
    """
    if shards < 1:
        raise ValueError(f"INDEX_SHARDS must be at least 1, not {shards}")
    return int(hashlib.sha256(room_id.encode()).hexdigest()[:8], 16) % shards


def merge_by_value(pages: list[list[tuple[int, str]]], limit: int) -> list[tuple[int, str]]:
    """Rows (value, room id) of several shards' queries, each already in
    (value, room id) order, merged into one order and cut at `limit`: what a
    single unsharded index would have answered. Ties on the value go by room
    id, like Firestore's own order by document id."""
    return sorted(row for page in pages for row in page)[:limit]


@dataclass
class ShardCursor:
    """Where one pass of a paged query over the index shards stands: for each
    shard, the (value, room id) of the last row it answered (the next page
    starts after it, Firestore's `start_after`), and the shards with nothing
    left. One cursor per shard, not one for all: a page takes only the first
    rows of each shard, so a shard's rows can lie before the last row merged
    from another shard, and one cursor would step over them. A fresh
    `ShardCursor()` starts every shard at its first row."""

    after: dict[int, tuple[int, str]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
