"""Firestore adapter: one transaction per room event, documents, op counters.

Layout:

- `rooms/{room_id}`: the room's whole state (`shared.room.room_to_doc`):
  in-flight attempt with its phase and deadlines, queue of pending messages
  with their bodies, recently ended messages (de-duplication), awaited pushes,
  counts. One document per room keeps a message at one write per transition:
  the queue lives beside the baton, so passing the baton and reading the next
  head are the same transaction. Its top-level `wake_at_us` (the in-flight
  attempt's timer due time, null when nothing waits) is what the watchdog
  queries, shard by shard: every room write also stores the room's `shard`
  (shared/shards.py), so no index range takes every room's writes.
- `rejected_messages/{pubsub_message_id}`: pushes that can never be valid,
  with their reason and raw content.
- `dead_letters/{room_id}:{incarnation}:{seq}`: messages baton gave up on, with their body.

Every document has `expire_at`, the field of the TTL policies infra/ sets (TTL
deletes within about 24 h of it). A room gets a time there only while it holds
nothing (no message in flight, queued or awaited); a room that holds a message
has `expire_at = null`, which TTL never deletes.

`rooms/{room_id}` changes only through `RoomStore.apply`, an optimistic
transaction (read, decide, write if unchanged since the read); nothing with a
side effect runs inside it, since it may run several times.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_transient_error
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.config import ENV_VARS
from shared.opcounts import OpCounts, begin_request, op_counts
from shared.records import DEAD_LETTERS, REJECTED, SCHEDULED_CANCELS, KeptRecords
from shared.room import (
    ROOMS,
    Decision,
    RoomState,
    acceptance_key,
    room_from_doc,
    room_to_doc,
)
from shared.shards import SHARD_FIELD, SHARDED_FIELDS, index_shard, merge_by_value

# A fresh id in every room write: after a commit whose answer was lost, the
# next read shows whether the write that landed was this request's own.
WRITE_ID = "write_id"
DEFAULT_INDEX_SHARDS = int(ENV_VARS["INDEX_SHARDS"][0])
# Shards one sharded query asks at a time (threads of one call).
SHARD_QUERY_CONCURRENCY = 16

# Named here too, where the rest of the code and the tests import them from.
__all__ = ["DEAD_LETTERS", "REJECTED", "SCHEDULED_CANCELS", "WRITE_ID", "ContentionError", "OpCounts", "RoomStore",
           "begin_request", "op_counts"]


class ContentionError(RuntimeError):
    """A room's document kept changing while a request tried to update it."""


# ---------------------------------------------------------------- the store


class RoomStore(KeptRecords):
    """Rooms and their records in Firestore.

    Args:
        client: a `google.cloud.firestore.Client` (FIRESTORE_EMULATOR_HOST
            points it at the emulator).
        retention_hours: how far ahead `expire_at` is set on every write.
        max_attempts: read-decide-write attempts before `ContentionError`.
        deadline_s: how long one Firestore call may retry transient errors, in
            s, before it raises (the caller then answers 5xx and is redelivered).
        index_shards: INDEX_SHARDS, the shards of the rooms' time-valued
            indexes (shared/shards.py): every room write stores its `shard`,
            and the watchdog's and the operators' queries ask every shard.
    """

    def __init__(self, client: firestore.Client, retention_hours: int, max_attempts: int = 10,
                 deadline_s: float = 10.0, index_shards: int = DEFAULT_INDEX_SHARDS) -> None:
        index_shard("", index_shards)  # raises ValueError below 1
        self._db = client
        self._shards = index_shards
        self._retention = timedelta(hours=retention_hours)
        self._max_attempts = max_attempts
        self._call = {"retry": Retry(initial=0.05, maximum=1.0, multiplier=2.0, timeout=deadline_s,
                                     predicate=if_transient_error),
                      "timeout": deadline_s}

    def _expire_at(self) -> datetime:
        return datetime.now(UTC) + self._retention

    def room_ref(self, room_id: str) -> firestore.DocumentReference:
        return self._db.collection(ROOMS).document(room_id)

    def apply(self, room_id: str, decide_fn: Callable[[RoomState], Decision]) -> Decision:
        """Run `decide_fn` on the room's state and commit what it decides, as
        one optimistic transaction: read the document without a lock, decide,
        then write on the condition that the document has not changed since
        (`last_update_time` precondition; `create` for a new room). If another
        request changed it first, read again and decide again.

        Why not a locking transaction: Firestore's server client libraries
        lock the documents a transaction reads (pessimistic concurrency), and
        on the emulator two overlapping transactions on one document cost
        2 s (measured, DESIGN.md); an ack and an enqueue of the same room meet
        often. Conditional writes keep the same atomicity without locks.
        A decision that changes nothing writes nothing (one read). If a commit
        fails with a conflict, the room is read again; if the stored `write_id`
        is this commit's own (the client library retried a commit that had
        landed), the decision stands as committed, so its effects still run.

        `decide_fn` may run several times and must not have side effects.
        Returns the decision that was committed.

        Raises:
            ContentionError: the room changed under us `max_attempts` times.
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the caller answers 5xx so the request is retried).
        """
        ref = self.room_ref(room_id)
        counts = op_counts()
        unconfirmed: tuple[str, Decision, int] | None = None  # a commit whose answer was lost
        for attempt in range(self._max_attempts):
            snap = ref.get(**self._call)
            counts.firestore_reads += 1
            stored = snap.to_dict() if snap.exists else None
            if unconfirmed is not None and stored is not None and stored.get(WRITE_ID) == unconfirmed[0]:
                # Our own commit landed although its answer said otherwise:
                # its decision stands, and its effects must still run.
                counts.firestore_writes += unconfirmed[2]
                return unconfirmed[1]
            unconfirmed = None
            decision = decide_fn(room_from_doc(room_id, stored))
            if decision.state is None:
                return decision
            expire_at = self._expire_at()
            write_id = uuid.uuid4().hex
            doc = {**room_to_doc(decision.state), WRITE_ID: write_id, SHARD_FIELD: index_shard(room_id, self._shards),
                   "expire_at": None if decision.state.holds_messages or decision.state.paused else expire_at}
            batch = self._db.batch()
            if snap.exists:
                batch.update(ref, doc, option=self._db.write_option(last_update_time=snap.update_time))
            else:
                batch.create(ref, doc)
            for effect in decision.dead_letters:
                # Data, not a side effect: committed atomically with the room.
                batch.set(self._dead_letter_ref(effect), self._dead_letter_doc(effect, expire_at))
            try:
                batch.commit(**self._call)
            except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.Aborted):
                # Another writer came first, or the client library retried a
                # commit of ours that had landed (its answer lost): the next
                # read tells which, by the write id.
                unconfirmed = (write_id, decision, 1 + len(decision.dead_letters))
                time.sleep(random.uniform(0, 0.005 * 2**attempt))
                continue
            except (gexc.DeadlineExceeded, gexc.ServiceUnavailable, gexc.InternalServerError, gexc.RetryError):
                # The commit's answer is unknown: it may have landed. Read
                # once more; if it did, the decision stands, else the error.
                landed = ref.get(**self._call).to_dict() or {}
                counts.firestore_reads += 1
                if landed.get(WRITE_ID) != write_id:
                    raise
                counts.firestore_writes += 1 + len(decision.dead_letters)
                return decision
            counts.firestore_writes += 1 + len(decision.dead_letters)
            return decision
        raise ContentionError(f"room {room_id!r} changed under {self._max_attempts} attempts in a row")

    # -- send acceptances, written blind

    def record_accepted(self, room_id: str, incarnation: int, seq: int, attempt: int, deadline_us: int) -> None:
        """Record that the platform accepted (seq, attempt) and the message is
        held until `deadline_us` (epoch us): one blind write of one entry of the
        room's `accepted` map, no read. `room_from_doc` folds it into the
        in-flight attempt exactly as the rule for an accepted send would, and
        the next transaction clears it; a blind write racing a transaction
        makes that transaction's precondition fail, so it reads it and decides
        again. Saves the read of a transaction on every message.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the room then treats the attempt as one whose
                outcome was never recorded, and holds it past the send window).
        """
        key = acceptance_key(incarnation, seq, attempt)
        try:
            self.room_ref(room_id).update({f"accepted.{key}": deadline_us}, **self._call)
        except gexc.NotFound:
            return  # no such room: nothing waits for this send
        op_counts().firestore_writes += 1

    def record_echo(self, room_id: str, incarnation: int, seq: int, attempt: int, platform_ts_us: int,
                    provider_message_id: str | None) -> None:
        """Record the platform's echo of our own send of (seq, attempt): its
        stamp (epoch us, the platform's clock) and message id. One blind write
        of one entry of the room's `echoes` map, no read (Messenger and
        Instagram only: WhatsApp sends no echoes); `room_from_doc` folds it
        into the in-flight attempt and the next transaction clears it.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the webhook answers 503 and Meta sends it again).
        """
        key = acceptance_key(incarnation, seq, attempt)
        try:
            self.room_ref(room_id).update({f"echoes.{key}": {"ts": platform_ts_us, "mid": provider_message_id}},
                                          **self._call)
        except gexc.NotFound:
            return  # no such room: nothing waits for this send
        op_counts().firestore_writes += 1

    # -- kept records


    # -- scheduled messages cancelled before their time


    # -- the watchdog's query

    def overdue_rooms(self, before_us: int, limit: int) -> list[str]:
        """Ids of rooms whose wake-up (`wake_at_us`) is before `before_us`
        (epoch us), oldest first, at most `limit`. One range query per index
        shard (`shard == i`, `wake_at_us < before_us`, composite index
        (shard, wake_at_us) in infra/firestore.tf), asked in parallel and
        merged; rooms with nothing waiting have null there and never match.
        Costs one read per shard at least (a query that finds nothing is
        billed one read), and one per room found."""
        rows = self._ask_shards("wake_at_us", lambda q: q.where(filter=FieldFilter("wake_at_us", "<", before_us)),
                                limit, None)
        return [room_id for room_id, _ in rows]

    def _ask_shards(self, name: str, narrow: Callable[[Any], Any], limit: int,
                    after: tuple[int, str] | None) -> list[tuple[str, dict[str, Any]]]:
        """The first `limit` rooms by (`name`, room id) over every index shard,
        each shard asked with `narrow` (a range on `name`), ordered by `name`
        and document id, resuming after `after` ((value, room id)) if given.
        Returns [(room_id, document)] in that order."""
        col = self._db.collection(ROOMS)

        def ask(shard: int) -> list[tuple[str, dict[str, Any]]]:
            query = narrow(col.where(filter=FieldFilter(SHARD_FIELD, "==", shard))).order_by(name).order_by("__name__")
            if after is not None:
                query = query.start_after({name: after[0], "__name__": self.room_ref(after[1])})
            return [(snap.id, snap.to_dict()) for snap in query.limit(limit).stream(**self._call)]

        with ThreadPoolExecutor(max_workers=min(self._shards, SHARD_QUERY_CONCURRENCY)) as pool:
            pages = list(pool.map(ask, range(self._shards)))
        docs = {room_id: doc for page in pages for room_id, doc in page}
        order = merge_by_value([[(doc[name], room_id) for room_id, doc in page] for page in pages], limit)
        op_counts().firestore_reads += sum(max(1, len(page)) for page in pages)
        return [(room_id, docs[room_id]) for _, room_id in order]

    def rooms_sending_to(self, recipient_key: str) -> list[str]:
        """Ids of every room whose in-flight message goes to `recipient_key`
        (`{provider}:{recipient}`, the room document's `in_flight_to`): where a
        receipt that names only the recipient (Messenger, Instagram) may
        belong. An equality query on Firestore's automatic single-field index,
        streamed to the end (no cap: a receipt left unapplied to a room would
        hold it to its ack timeout); one read at least, even when nothing
        matches, and one per room found."""
        query = self._db.collection(ROOMS).where(filter=FieldFilter("in_flight_to", "==", recipient_key))
        ids = [snap.id for snap in query.select([]).stream(**self._call)]
        op_counts().firestore_reads += max(1, len(ids))
        return ids

    # -- reading (tests, tools)

    def load_room(self, room_id: str) -> RoomState | None:
        """The stored room, or None. Outside any transaction."""
        snap = self.room_ref(room_id).get()
        return room_from_doc(room_id, snap.to_dict()) if snap.exists else None

    # -- the operators' queries (shared/operators.py, the `baton` CLI)

    def room_doc(self, room_id: str) -> dict[str, Any] | None:
        """The stored room document as Firestore has it (with `expire_at`), or None."""
        snap = self.room_ref(room_id).get(**self._call)
        return snap.to_dict() if snap.exists else None

    def room_docs(self, room_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Several room documents in one batched read: room id -> document (missing ones left out)."""
        refs = [self.room_ref(r) for r in room_ids]
        return {s.id: s.to_dict() for s in self._db.get_all(refs, **self._call) if s.exists} if refs else {}

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

        Ties are broken by document id. Returns ([(room_id, document)], the
        cursor of the next page or None). `cursor` is what an earlier page
        returned: `"{value}:{room_id}"`.

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
            rows = [(snap.id, snap.to_dict()) for snap in query.limit(limit).stream(**self._call)]
            op_counts().firestore_reads += max(1, len(rows))
        next_cursor = f"{rows[-1][1][name]}:{rows[-1][0]}" if len(rows) == limit else None
        return rows, next_cursor


