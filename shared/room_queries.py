"""The rooms' queries: the watchdog's, the receipts' and the operators'.

`shared.store.RoomStore` holds one as its `queries`, built on the store's
Firestore client, call options and index shard count. The time-valued
fields are indexed behind the room's shard (shared/shards.py): the
watchdog asks shard by shard, the operators' listings every shard in one
query (`shard in [...]`, `shard_groups`). Every query goes through the
store's counted calls (shared/firestore_calls.py), which count the reads
Firestore bills (one at least, one per document found; one per count
aggregation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter, Or

from shared import outbox
from shared.firestore_calls import PARALLEL_CALLS, FirestoreCalls
from shared.room_document import ROOMS
from shared.shards import SHARD_FIELD, SHARDED_FIELDS, ShardCursor, merge_by_value

# Shards one sharded query asks at a time (threads of one call).
SHARD_QUERY_CONCURRENCY = PARALLEL_CALLS
# How long one count aggregation may take (s): Firestore ends one that cannot
# finish in 60 s (https://firebase.google.com/docs/firestore/query-data/aggregation-queries#limitations);
# the store's 10 s deadline is for a room's reads and writes. On the emulator a
# count scans every room (about 2.5 s a sharded field at 10,000 rooms).
COUNT_DEADLINE_S = 60.0
# Firestore's cap on the disjunctions of one query, so on the values of an
# `in` filter: https://firebase.google.com/docs/firestore/query-data/queries#limits_on_or_queries
MAX_DISJUNCTIONS = 30


def shard_groups(shards: int) -> list[list[int]]:
    """The index shards 0 .. `shards` - 1 in as few groups as one query each
    can ask (`shard in [...]`, at most MAX_DISJUNCTIONS values), of even
    sizes: 16 -> one group of 16; 40 -> two of 20.

    Raises:
        ValueError: `shards` is below 1.
    """
    if shards < 1:
        raise ValueError(f"INDEX_SHARDS must be at least 1, not {shards}")
    n = -(-shards // MAX_DISJUNCTIONS)
    return [list(range(shards))[k::n] for k in range(n)]


class RoomQueries:
    """Queries over the room collection (`RoomStore.queries`)."""

    def __init__(self, calls: FirestoreCalls, index_shards: int) -> None:
        """The store's counted calls (its client, retry and timeout), INDEX_SHARDS."""
        self._fs = calls
        self._db = calls.client
        self._shards = index_shards

    def room_ref(self, room_id: str) -> firestore.DocumentReference:
        return self._db.collection(ROOMS).document(room_id)

    # -- the watchdog's query

    def overdue_rooms(self, before_us: int, limit: int, cursor: ShardCursor | None = None) -> list[str]:
        """Ids of at most `limit` rooms whose wake-up (`wake_at_us`) is before
        `before_us` (epoch us): the most overdue of each index shard, about
        `limit / INDEX_SHARDS` from each (one range query per shard, `shard ==
        i`, `wake_at_us < before_us`, composite index (shard, wake_at_us) in
        infra/firestore.tf, asked in parallel), merged oldest first. Not the
        `limit` most overdue of all: the sweep rescues what it gets and asks
        for the next page until none is left, and asking each shard for
        `limit` rooms would read up to INDEX_SHARDS x `limit` documents per
        batch after an incident. Rooms with nothing waiting have null there
        and never match.

        With `cursor`, each shard resumes after the last room it answered
        through that cursor (shards with nothing left are not asked again),
        and the cursor moves past the rooms returned: the sweep pages past
        rooms it could not rescue, which stay overdue and would otherwise
        come first in every query. Without it, every shard starts at its first
        row. Returns [] once every shard is done.

        Costs one read per shard asked at least (a query that finds nothing is
        billed one read), and one per room found."""
        per_shard = max(1, -(-limit // self._shards))
        shards = [i for i in range(self._shards) if cursor is None or i not in cursor.done]
        pages = self._shard_pages("wake_at_us", lambda q: q.where(filter=FieldFilter("wake_at_us", "<", before_us)),
                                  per_shard, cursor.after if cursor is not None else {}, shards)
        shard_of = {room_id: shard for shard, page in pages.items() for room_id, _ in page}
        order = merge_by_value([[(doc["wake_at_us"], room_id) for room_id, doc in page] for page in pages.values()],
                               limit)
        if cursor is not None:
            taken: dict[int, int] = {}
            for value, room_id in order:
                shard = shard_of[room_id]
                cursor.after[shard] = (value, room_id)
                taken[shard] = taken.get(shard, 0) + 1
            for shard, page in pages.items():
                # Done: the shard had fewer rows than asked, and all of them were taken.
                if len(page) < per_shard and taken.get(shard, 0) == len(page):
                    cursor.done.add(shard)
        return [room_id for _, room_id in order]

    def _shard_pages(self, name: str, narrow: Callable[[Any], Any], per_shard: int,
                     after: dict[int, tuple[int, str]], shards: list[int]) -> dict[int, list[tuple[str, dict[str, Any]]]]:
        """The first `per_shard` rooms by (`name`, room id) of each shard of
        `shards`, each asked with `narrow` (a range on `name`) in parallel,
        resuming after `after[shard]` ((value, room id)) where given.
        Returns {shard: [(room_id, document)]} in that order; counts the reads."""
        col = self._db.collection(ROOMS)

        def query(shard: int) -> Any:
            q = narrow(col.where(filter=FieldFilter(SHARD_FIELD, "==", shard))).order_by(name).order_by("__name__")
            if shard in after:
                value, room_id = after[shard]
                q = q.start_after({name: value, "__name__": self.room_ref(room_id)})
            return q.limit(per_shard)

        pages = self._fs.stream_all({shard: query(shard) for shard in shards})
        return {shard: [(snap.id, snap.to_dict() or {}) for snap in page] for shard, page in pages.items()}

    def _ask_shards(self, name: str, narrow: Callable[[Any], Any], limit: int,
                    after: tuple[int, str] | None) -> list[tuple[str, dict[str, Any]]]:
        """The first `limit` rooms by (`name`, room id) over every index shard
        (what one unsharded index would give), resuming after `after` ((value,
        room id)) if given. Each group of shards (`shard_groups`) is one query
        (`shard in [...]`: Firestore merges the composite index's ranges), so
        up to MAX_DISJUNCTIONS shards a page is one query reading what it shows.
        With more groups, each is asked for `limit // groups` rows (at least 1)
        in parallel, then, while fewer than `limit` rows are known to come
        first (up to the watermark: the lowest last row of the groups not yet
        exhausted), the group at the watermark alone for its next chunk: at
        most one chunk per group read and not shown, max(`limit`, groups)
        rows. An empty answer is still billed one read (counted).
        Returns [(room_id, document)] in that order."""
        groups = dict(enumerate(shard_groups(self._shards)))
        chunk = max(1, limit // len(groups))
        rows = self._group_pages(name, narrow, chunk, dict.fromkeys(groups, after) if after is not None else {},
                                 groups)

        def last(group: int) -> tuple[Any, str]:
            room_id, doc = rows[group][-1]
            return doc[name], room_id

        more = {group for group, page in rows.items() if len(page) == chunk}
        while more:
            low = min(more, key=last)
            mark = last(low)
            if sum(1 for page in rows.values() for room_id, doc in page if (doc[name], room_id) <= mark) >= limit:
                break
            page = self._group_pages(name, narrow, chunk, {low: mark}, {low: groups[low]})[low]
            rows[low].extend(page)
            if len(page) < chunk:
                more.discard(low)
        docs = {room_id: doc for page in rows.values() for room_id, doc in page}
        order = merge_by_value([[(doc[name], room_id) for room_id, doc in page] for page in rows.values()], limit)
        return [(room_id, docs[room_id]) for _, room_id in order]

    def _group_pages(self, name: str, narrow: Callable[[Any], Any], per_group: int,
                     after: dict[int, tuple[int, str] | None], groups: dict[int, list[int]]
                     ) -> dict[int, list[tuple[str, dict[str, Any]]]]:
        """The first `per_group` rooms by (`name`, room id) of each group of
        shards (`groups`: key -> shard numbers), one query per group
        (`shard == s` for a group of one, else `shard in [...]`), each
        narrowed by `narrow` (a range on `name`), asked in parallel, resuming
        after `after[key]` ((value, room id)) where given.
        Returns {key: [(room_id, document)]} in that order; counts the reads."""
        col = self._db.collection(ROOMS)

        def query(key: int) -> Any:
            shards = groups[key]
            flt = FieldFilter(SHARD_FIELD, "==", shards[0]) if len(shards) == 1 else \
                FieldFilter(SHARD_FIELD, "in", shards)
            q = narrow(col.where(filter=flt)).order_by(name).order_by("__name__")
            start = after.get(key)
            if start is not None:
                q = q.start_after({name: start[0], "__name__": self.room_ref(start[1])})
            return q.limit(per_group)

        pages = self._fs.stream_all({key: query(key) for key in groups})
        return {key: [(snap.id, snap.to_dict() or {}) for snap in page] for key, page in pages.items()}

    def rooms_sending_to(self, recipient_key: str) -> list[str]:
        """Ids of every room whose in-flight message goes to `recipient_key`
        (`{provider}:{recipient}`, the room document's `in_flight_to`): where a
        receipt that names only the recipient (Messenger, Instagram) may
        belong. An equality query on Firestore's automatic single-field index,
        streamed to the end (no cap: a receipt left unapplied to a room would
        hold it to its ack timeout); one read at least, even when nothing
        matches, and one per room found."""
        query = self._db.collection(ROOMS).where(filter=FieldFilter("in_flight_to", "==", recipient_key))
        return [snap.id for snap in self._fs.stream(query.select([]))]

    def rooms_for_receipt(self, recipient_key: str, receipt: str) -> list[str]:
        """Ids of every room a receipt by recipient (Messenger, Instagram)
        goes to: those sending to `recipient_key` (`in_flight_to`), OR the
        one whose last write applied this very receipt (`receipt`, the
        document's `outbox.RECEIPT`: `outbox.receipt_digest` of its
        idempotency key), idle or not, whose read logs that write's lines
        (shared/outbox.py). One query, an OR of two equalities
        (https://firebase.google.com/docs/firestore/query-data/queries#or_queries),
        each on its field's automatic single-field index (neither exempt in
        infra/firestore.tf), streamed to the end; billed as
        `rooms_sending_to`: one read at least, and one per room found."""
        query = self._db.collection(ROOMS).where(filter=Or([FieldFilter("in_flight_to", "==", recipient_key),
                                                            FieldFilter(outbox.RECEIPT, "==", receipt)]))
        return [snap.id for snap in self._fs.stream(query.select([]))]

    # -- the operators' queries (shared/operators.py, the `baton` CLI)

    def room_doc(self, room_id: str) -> dict[str, Any] | None:
        """The stored room document as Firestore has it (with `expire_at`), or None."""
        snap = self.room_ref(room_id).get(**self._fs.call)  # not counted (the operators' views)
        return snap.to_dict() if snap.exists else None

    def room_docs(self, room_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Several room documents in one batched read: room id -> document (missing ones left out)."""
        refs = [self.room_ref(r) for r in room_ids]
        return {s.id: s.to_dict() or {} for s in self._db.get_all(refs, **self._fs.call) if s.exists} if refs else {}

    def list_rooms(self, kind: str, limit: int, cursor: str | None = None,
                   before_us: int | None = None) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """One page of rooms, by a query on one top-level field: a field of
        `SHARDED_FIELDS` is asked shard by shard and merged (composite indexes
        (shard, field) in infra/firestore.tf), `parked` by its automatic
        single-field index; no scan:

        - `stuck`: `wake_at_us < before_us` (epoch us), most overdue first;
        - `lag`: rooms holding a message, oldest head of line (`head_since_us`) first;
        - `paused`: paused rooms, longest paused first (`paused_at_us`);
        - `parked`: rooms with parked messages (`parked > 0`), fewest first.

        Ties by document id. Returns ([(room_id, document)], the next page's
        cursor `"{value}:{room_id}"` or None); `cursor` is an earlier one's.

        Raises:
            ValueError: unknown `kind`, `stuck` without `before_us`, or a malformed cursor.
        """
        fields = {"stuck": "wake_at_us", "lag": "head_since_us", "paused": "paused_at_us", "parked": "parked"}
        if kind not in fields:
            raise ValueError(f"unknown room listing {kind!r}: one of {sorted(fields)}")
        name = fields[kind]
        if kind == "stuck" and before_us is None:
            raise ValueError("the stuck listing needs before_us")
        after: tuple[int, str] | None = None
        if cursor:
            value, sep, after_id = cursor.partition(":")
            if not sep or not value.lstrip("-").isdigit() or not after_id:
                raise ValueError(f"not a cursor of this listing: {cursor!r}")
            after = (int(value), after_id)
        flt = FieldFilter(name, "<", before_us) if kind == "stuck" else FieldFilter(name, ">", 0)
        if name in SHARDED_FIELDS:
            rows = self._ask_shards(name, lambda q: q.where(filter=flt), limit, after)
        else:
            query = self._db.collection(ROOMS).where(filter=flt).order_by(name).order_by("__name__")
            if after is not None:
                query = query.start_after({name: after[0], "__name__": self.room_ref(after[1])})
            rows = [(snap.id, snap.to_dict() or {}) for snap in self._fs.stream(query.limit(limit))]
        next_cursor = f"{rows[-1][1][name]}:{rows[-1][0]}" if len(rows) == limit else None
        return rows, next_cursor

    # -- the overview's counts (`baton status`, shared/admin/overview.py)

    def count_rooms(self, kind: str, before_us: int | None = None) -> int:
        """How many rooms a `list_rooms` listing would page through: a count
        aggregation (one read per 1,000 index entries counted,
        https://cloud.google.com/firestore/pricing#aggregation_queries) per
        group of shards for a sharded field (`shard in [...]`, `shard_groups`).

        Raises:
            ValueError: unknown `kind`, or `stuck` without `before_us`.
        """
        fields = {"stuck": "wake_at_us", "lag": "head_since_us", "paused": "paused_at_us", "parked": "parked"}
        if kind not in fields or (kind == "stuck" and before_us is None):
            raise ValueError(f"no room count {kind!r}")
        name = fields[kind]
        flt = FieldFilter(name, "<", before_us) if kind == "stuck" else FieldFilter(name, ">", 0)
        col = self._db.collection(ROOMS)
        if name not in SHARDED_FIELDS:
            return self._count(col.where(filter=flt))
        # One count aggregation per group, asked at once.
        return sum(self._fs.count_all([col.where(filter=FieldFilter(SHARD_FIELD, "in", g)).where(filter=flt)
                                       for g in shard_groups(self._shards)], COUNT_DEADLINE_S))

    def count_in_flight(self, provider: str) -> int:
        """Rooms with a message in flight to `provider` (`in_flight_to` starts
        with `{provider}:`; its automatic single-field index)."""
        col = self._db.collection(ROOMS)
        return self._count(col.where(filter=FieldFilter("in_flight_to", ">=", f"{provider}:"))
                           .where(filter=FieldFilter("in_flight_to", "<", f"{provider};")))

    def count_collection(self, name: str) -> int:
        """Documents in collection `name` (count aggregation)."""
        return self._count(self._db.collection(name))

    def _count(self, query: Any) -> int:
        return self._fs.count(query, COUNT_DEADLINE_S)



class SendingNumberQueries:
    """The rooms sending from one WhatsApp number: the room document's
    `in_flight_from` (the phone-number id of the attempt in flight, None
    otherwise; shared/room_document.py), on Firestore's automatic single-field
    index (a handful of values, each index range spread over the rooms' ids:
    no sequential range). For the console's overview and its listing by
    number (shared/admin/numbers.py); beside `RoomQueries`, on the store's
    client and call options."""

    FIELD = "in_flight_from"

    def __init__(self, calls: FirestoreCalls) -> None:
        """The store's counted calls (its client, retry and timeout)."""
        self._fs = calls
        self._db = calls.client

    def count_sending_from(self, numbers: list[str]) -> dict[str, int]:
        """Rooms with an attempt in flight from each of `numbers` (phone-number
        ids): one count aggregation each, asked at once (one read per 1,000
        index entries counted)."""
        rooms = self._db.collection(ROOMS)
        counted = self._fs.count_all([rooms.where(filter=FieldFilter(self.FIELD, "==", n)) for n in numbers],
                                     COUNT_DEADLINE_S)
        return dict(zip(numbers, counted, strict=True))

    def list_sending_from(self, number: str, limit: int,
                          cursor: str | None = None) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """One page of the rooms sending from `number`, by room id: an
        equality query ordered by document id, `limit` documents read (one at
        least). Returns ([(room_id, document)], the next page's cursor (the
        last room id) or None); `cursor` is an earlier one's."""
        rooms = self._db.collection(ROOMS)
        query = rooms.where(filter=FieldFilter(self.FIELD, "==", number)).order_by("__name__")
        if cursor:
            query = query.start_after({"__name__": rooms.document(cursor)})
        rows = [(snap.id, snap.to_dict() or {}) for snap in self._fs.stream(query.limit(limit))]
        return rows, (rows[-1][0] if len(rows) == limit else None)
