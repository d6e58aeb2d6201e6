"""Firestore adapter: one transaction per room event, documents, op counters.

Layout:

- `rooms/{room_id}`: the room's whole state (`shared.room_document.room_to_doc`):
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
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_transient_error
from google.cloud import firestore

from shared import outbox
from shared.clock import SYSTEM_CLOCK
from shared.config import ENV_VARS
from shared.firestore_calls import FirestoreCalls
from shared.opcounts import OpCounts, begin_request, op_counts
from shared.ports import Clock
from shared.records import DEAD_LETTERS, REJECTED, SCHEDULED_CANCELS, KeptRecords
from shared.room import Decision, RoomState
from shared.room_document import ROOMS, acceptance_key, room_as_read, room_to_doc
from shared.room_queries import SHARD_QUERY_CONCURRENCY, RoomQueries, SendingNumberQueries
from shared.shards import SHARD_FIELD, index_shard
from shared.swept_rooms import SweptRooms

# A fresh id in every room write: after a commit whose answer was lost, the
# next read shows whether the write that landed was this request's own.
WRITE_ID = "write_id"
DEFAULT_INDEX_SHARDS = int(ENV_VARS["INDEX_SHARDS"][0])

# Named here too, where the rest of the code and the tests import them from.
__all__ = ["DEAD_LETTERS", "REJECTED", "SCHEDULED_CANCELS", "SHARD_QUERY_CONCURRENCY", "WRITE_ID", "ContentionError", "OpCounts", "RoomStore",
           "begin_request", "op_counts"]


class ContentionError(RuntimeError):
    """A room's document kept changing while a request tried to update it."""


# ---------------------------------------------------------------- the store


class RoomStore:
    """Rooms and their records in Firestore: the room transaction and the
    blind writes here; what is kept beside the rooms in `records`
    (shared/records.py), the queries over the rooms in `queries`
    (shared/room_queries.py), both on the same client and call options.

    The methods of `records` and `queries` that shared/service/,
    shared/admin/ and shared/operators.py call on the store are forwarded
    (bound to the parts' methods in `__init__`) until those callers use the
    parts themselves.

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
        clock: the time of `expire_at` and of the records' stamps.
    """

    # Logs the events a transaction finds left in the room's outbox, before
    # its commit replaces them (shared/outbox.py); the service sets it.
    outbox_sink: outbox.Sink | None = None

    def __init__(self, client: firestore.Client, retention_hours: int, max_attempts: int = 10,
                 deadline_s: float = 10.0, index_shards: int = DEFAULT_INDEX_SHARDS,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        index_shard("", index_shards)  # raises ValueError below 1
        self._db = client
        self._shards = index_shards
        self._retention = timedelta(hours=retention_hours)
        self._max_attempts = max_attempts
        self._call: dict[str, Any] = {
            "retry": Retry(initial=0.05, maximum=1.0, multiplier=2.0, timeout=deadline_s, predicate=if_transient_error),
            "timeout": deadline_s}
        self._clock = clock
        self._fs = FirestoreCalls(client, self._call)  # counted calls (shared/firestore_calls.py)
        self.records = KeptRecords(self._fs, self._expire_at, clock)
        self.queries = RoomQueries(self._fs, index_shards)
        self.swept = SweptRooms(self._fs)  # the rooms a sweep left idle (shared/swept_rooms.py)
        # Forwarded to the parts (the class docstring): thin delegations.
        records, queries = self.records, self.queries
        self.keep_rejected = records.keep_rejected
        self.record_scheduled = records.record_scheduled
        self.cancel_scheduled = records.cancel_scheduled
        self.claim_cancelled_end = records.claim_cancelled_end
        self.dead_letters = records.dead_letters
        self.dead_letter = records.dead_letter
        self.rejected = records.rejected
        self.rejected_one = records.rejected_one
        self.claim_replay = records.claim_replay
        self.finish_replay = records.finish_replay
        self.overdue_rooms = queries.overdue_rooms
        self.rooms_sending_to = queries.rooms_sending_to
        self.rooms_for_receipt = queries.rooms_for_receipt
        self.recently_swept = self.swept.recently_swept
        self.room_doc = queries.room_doc
        self.room_docs = queries.room_docs
        self.list_rooms = queries.list_rooms
        self.count_rooms = queries.count_rooms
        self.count_in_flight = queries.count_in_flight
        self.count_collection = queries.count_collection
        self.numbers = SendingNumberQueries(self._fs)  # the console's rooms per WhatsApp number

    def _call_within(self, deadline_s: float | None) -> dict[str, Any]:
        """The retry and timeout of one call: the store's, or one try of
        `deadline_s` (s)."""
        return self._call if deadline_s is None else {"retry": None, "timeout": deadline_s}

    def _expire_at(self) -> datetime:
        return datetime.fromtimestamp(self._clock.now_us() / 1_000_000, UTC) + self._retention

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
        unconfirmed: tuple[str, Decision, int] | None = None  # a commit whose answer was lost
        receipt = outbox.receipt_of_write()  # the receipt this transaction applies, if any (shared/outbox.py)
        for attempt in range(self._max_attempts):
            snap = self._fs.get(ref)
            stored = snap.to_dict() if snap.exists else None
            if unconfirmed is not None and stored is not None and stored.get(WRITE_ID) == unconfirmed[0]:
                # Our own commit landed although its answer said otherwise:
                # its decision stands, and its effects must still run.
                self._fs.landed(unconfirmed[2])
                return unconfirmed[1]
            unconfirmed = None
            read = room_as_read(room_id, stored, self._clock.now_us())  # the blind-written facts applied
            decision = decide_fn(read)
            # The outbox (shared/outbox.py): log what an earlier write left, before this commit replaces it.
            left = outbox.left_behind(room_id, stored)
            if decision.state is None:  # a read that decides nothing: only what its own message's lines may be
                left = (outbox.concerning(left, decision.events) | outbox.of_receipt(left, stored, receipt, WRITE_ID)
                        | outbox.of_sweep(left, stored, WRITE_ID))
            if left and self.outbox_sink is not None:
                outbox.log_left_behind(room_id, left, self.outbox_sink)
            if decision.state is None:
                return outbox.stamped(decision, None, read.incarnation)
            expire_at = self._expire_at()
            write_id = uuid.uuid4().hex
            state = decision.state
            decision = outbox.stamped(decision, write_id, state.incarnation)
            doc = {**room_to_doc(state), WRITE_ID: write_id, SHARD_FIELD: index_shard(room_id, self._shards),
                   "expire_at": None if state.holds_messages or state.paused else expire_at,
                   outbox.RECEIPT: receipt,
                   outbox.OUTBOX: outbox.entry(decision, write_id,
                                               outbox.carried(stored, left) if self.outbox_sink is None else None)}
            doc = outbox.fitted(f"{ROOMS}/{room_id}", doc)  # never past 1 MiB for the outbox's sake
            swept = outbox.swept_of_write(doc)  # a sweep's write that leaves the room idle (shared/outbox.py)
            if swept is not None:
                doc[outbox.SWEPT] = swept
            elif stored is not None and outbox.SWEPT in stored:
                doc[outbox.SWEPT] = firestore.DELETE_FIELD  # an update keeps fields it does not name
            batch = self._db.batch()
            if snap.exists:
                batch.update(ref, doc, option=self._db.write_option(last_update_time=snap.update_time))
            else:
                batch.create(ref, doc)
            for effect in decision.dead_letters:
                # Data, not a side effect: committed atomically with the room.
                batch.set(self.records.dead_letter_ref(effect), self.records.dead_letter_doc(effect, expire_at))
            try:
                self._fs.commit(batch, 1 + len(decision.dead_letters))
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
                landed = self._fs.get(ref).to_dict() or {}
                if landed.get(WRITE_ID) != write_id:
                    raise
                self._fs.landed(1 + len(decision.dead_letters))
                return decision
            return decision
        raise ContentionError(f"room {room_id!r} changed under {self._max_attempts} attempts in a row")

    # -- send acceptances, written blind

    def record_accepted(self, room_id: str, incarnation: int, seq: int, attempt: int, deadline_us: int) -> None:
        """Record that the platform accepted (seq, attempt) and the message is
        held until `deadline_us` (epoch us): one blind write of one entry of the
        room's `accepted` map, no read, which saves the read of a transaction
        on every message. Every read of the room applies it
        (`AcceptanceRecorded`, its rows of `RULES`) before the event being
        decided; why a transaction racing it is safe: docs/architecture.md,
        "Writes outside the transaction".

        No longer on the normal path (issue 46): the acceptance rides on the
        attempt's timer (`ScheduleTimer.accepted_deadline_us`). Kept, with
        its fact rows, for the documents older code wrote during a rolling
        deploy, and for a send whose decision arms no timer of its attempt
        (none does today: `ServiceCore._send` falls back to it).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the room then treats the attempt as one whose
                outcome was never recorded, and holds it past the send window).
        """
        key = acceptance_key(incarnation, seq, attempt)
        # The same write deletes the outbox entries this request logged (shared/outbox.py).
        fields: dict[str, Any] = {f"accepted.{key}": deadline_us,
                                  **dict.fromkeys(outbox.cleared(room_id), firestore.DELETE_FIELD)}
        try:
            self._fs.update(self.room_ref(room_id), fields)
        except gexc.NotFound:
            return  # no such room: nothing waits for this send

    def record_echo(self, room_id: str, incarnation: int, seq: int, attempt: int, platform_ts_us: int,
                    provider_message_id: str | None, number: str | None = None,
                    deadline_s: float | None = None) -> None:
        """Record the platform's own record of our send of (seq, attempt): a
        Messenger or Instagram echo, or a WhatsApp `sent` status
        (WHATSAPP_SENT_PROOF=on). Its stamp (epoch us, the platform's clock),
        message id and, for WhatsApp, the number it names
        (`metadata.phone_number_id`). One blind write of one entry of the
        room's `echoes` map, no read; every read of the room applies it
        (`EchoRecorded`) as `record_accepted`'s entry is.

        `deadline_s`: one try of at most that long (s) instead of the
        store's retries within its deadline, for a caller to whom a lost
        write costs little and a slow one much.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the webhook answers 503 and Meta sends it again).
        """
        key = acceptance_key(incarnation, seq, attempt)
        entry: dict[str, object] = {"ts": platform_ts_us, "mid": provider_message_id}
        if number is not None:
            entry["num"] = number
        try:
            self._fs.update(self.room_ref(room_id), {f"echoes.{key}": entry}, call=self._call_within(deadline_s))
        except gexc.NotFound:
            return  # no such room: nothing waits for this send

    def read_room(self, room_id: str, deadline_s: float | None = None) -> RoomState | None:
        """The stored room as a transaction would see it (blind-written
        acceptances and echoes applied, `room_as_read`), or None: one read, counted, outside
        any transaction, so what it shows may already have changed. For a
        check whose wrong answer costs only a redundant or a missing blind
        write (WHATSAPP_SENT_PROOF). `deadline_s`: as for `record_echo`.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable.
        """
        snap = self._fs.get(self.room_ref(room_id), self._call_within(deadline_s))
        return room_as_read(room_id, snap.to_dict(), self._clock.now_us()) if snap.exists else None

    # -- reading (tests, tools)

    def load_room(self, room_id: str) -> RoomState | None:
        """The stored room as read (`room_as_read`), or None. Outside any transaction."""
        snap = self.room_ref(room_id).get()
        return room_as_read(room_id, snap.to_dict(), self._clock.now_us()) if snap.exists else None
