"""Kept records: dead letters (`dead_letters/`), rejected pushes
(`rejected_messages/`), cancelled scheduled messages (`scheduled_cancels/`).

Writes and reads those collections only; a room's own document is
shared/store.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.clock import SYSTEM_CLOCK
from shared.firestore_calls import FirestoreCalls
from shared.ports import Clock
from shared.room import KeepDeadLetter
from shared.room_document import message_to_doc

REJECTED = "rejected_messages"

DEAD_LETTERS = "dead_letters"

SCHEDULED_CANCELS = "scheduled_cancels"

def _doc_id(message_id: str) -> str:
    """A Firestore document id for any message id (ids may hold `/`)."""
    return hashlib.sha256(message_id.encode()).hexdigest()


def scheduled_key(room_id: str, message_id: str) -> str:
    """What names one scheduled message: `"{room_id} {message_id}"` (neither
    holds a space: shared/push.py), the key of its task and of its record."""
    return f"{room_id} {message_id}"


class KeptRecords:
    """What the store keeps beside the rooms: dead letters, rejected pushes,
    cancelled scheduled messages, and the replays of rejected pushes.
    `shared.store.RoomStore` holds one as its `records`.

    Args:
        calls: the store's Firestore calls (its client, retry and timeout;
            each call counted: shared/firestore_calls.py).
        expire_at: when a record written now may be deleted by TTL (the
            store's retention from now).
        clock: the time of the records' stamps (`dead_lettered_at`, `at`, ...).
    """

    def __init__(self, calls: FirestoreCalls, expire_at: Callable[[], datetime], clock: Clock = SYSTEM_CLOCK) -> None:
        self._fs = calls
        self._db = calls.client
        self._expire_at = expire_at
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock.now_us() / 1_000_000, UTC)

    def dead_letter_ref(self, effect: KeepDeadLetter) -> firestore.DocumentReference:
        """Where the dead letter of `effect` is kept (written in the room's own transaction)."""
        return self._db.collection(DEAD_LETTERS).document(f"{effect.room_id}:{effect.incarnation}:{effect.message.seq}")

    def dead_letter_doc(self, effect: KeepDeadLetter, expire_at: datetime) -> dict[str, Any]:
        """The kept dead letter of `effect`, deleted by TTL after `expire_at`."""
        return {
            "room_id": effect.room_id,
            "incarnation": effect.incarnation,
            "message": message_to_doc(effect.message),
            "attempts": effect.attempts,
            "reason": effect.reason,
            "dead_lettered_at": self._now(),
            "expire_at": expire_at,
        }

    def keep_rejected(self, key: str, reason: str, record: dict[str, Any]) -> None:
        """Keep a push that can never be valid, under `rejected_messages/{key}`."""
        self._fs.set(self._db.collection(REJECTED).document(key),
                     {**record, "reason": reason, "rejected_at": self._now(), "expire_at": self._expire_at()})

    # -- scheduled messages (`scheduled_cancels/{hash of room and message id}`):
    # the record of a message waiting for its time, and of its cancellation.
    # Keyed by the room too: message ids are unique per room only.

    def _scheduled_ref(self, room_id: str, message_id: str) -> firestore.DocumentReference:
        return self._db.collection(SCHEDULED_CANCELS).document(_doc_id(scheduled_key(room_id, message_id)))

    def record_scheduled(self, message_id: str, room_id: str, deliver_at_us: int, hop_due_us: int, task: str) -> None:
        """Record that a message waits for its time (epoch us) as the Cloud
        Tasks task `task` (its id), due at `hop_due_us`: what a cancel deletes
        by name. Merged into the document, so a cancellation written before
        stays; kept by TTL until RETENTION_HOURS past the message's time.
        One write per scheduled message and hop, none for other messages."""
        at = datetime.fromtimestamp(deliver_at_us / 1_000_000, UTC)
        now = self._now()
        self._fs.set(self._scheduled_ref(room_id, message_id),
                     {"message_id": message_id, "room_id": room_id, "deliver_at_us": deliver_at_us,
                      "hop_due_us": hop_due_us, "task": task, "expire_at": max(at, now) + (self._expire_at() - now)},
                     merge=True)

    def cancel_scheduled(self, room_id: str, message_id: str, actor: str, reason: str) -> dict[str, Any] | None:
        """Mark room `room_id`'s scheduled message cancelled (`actor`, `reason`, `at`);
        returns what was recorded of it before (its `task` and times, and
        `entered_at` when a copy was let in already: then the cancel is too
        late and its task must be left alone), or None when nothing was
        (published before this record existed, or not scheduled at all). The cancellation is kept at least until the
        message's time plus RETENTION_HOURS; with no recorded time, until the
        message comes (`claim_cancelled_end` then sets its expiry)."""
        ref = self._scheduled_ref(room_id, message_id)
        for _ in range(5):  # written on the record as read: `entered_at` (a copy let in meanwhile) is never missed
            snap = self._fs.get(ref)
            before = snap.to_dict() if snap.exists else None
            fields: dict[str, Any] = {"message_id": message_id, "room_id": room_id, "actor": actor, "reason": reason,
                                      "at": self._now()}
            if not before or before.get("expire_at") is None:
                fields["expire_at"] = None  # never deleted before the message has come and ended
            try:
                if before is None:
                    self._fs.create(ref, fields)
                else:
                    self._fs.update(ref, fields, since=snap)
            except (gexc.FailedPrecondition, gexc.AlreadyExists):
                continue
            return before
        raise gexc.Aborted(f"scheduled message {message_id!r}: its record kept changing")

    def claim_cancelled_end(self, room_id: str, message_id: str) -> tuple[str, dict[str, Any] | None]:
        """Whether room `room_id`'s scheduled message that has come was cancelled, and if so
        whether this call is the one that ends it: (`not_cancelled`, None),
        (`ended_now`, the cancellation) or (`ended_before`, the cancellation).
        The first caller writes `ended_at` with a precondition on the
        document's update time, so of a task and a redelivered push racing,
        one ends the message (one `skipped`). The first copy let in writes
        `entered_at` the same way: a cancel that lands after it is too late,
        and a later copy (a task run twice, a redelivered push) goes to the
        room, which drops it as a duplicate, instead of ending `skipped` a
        message that is being sent (found by the simulation, seeds 33 and
        320: the second never held, its hold refused, its push let in by a
        redelivery). One read, plus one write the first time a scheduled
        message comes and when it is cancelled."""
        ref = self._scheduled_ref(room_id, message_id)
        for _ in range(5):  # the document changed between the read and the write: read it again
            snap = self._fs.get(ref)
            doc = snap.to_dict() if snap.exists else None
            if doc is not None and doc.get("entered_at") is not None:
                return "not_cancelled", None
            if doc is None:  # never held (due at once, or its hold failed): the record starts here
                try:
                    self._fs.create(ref, {"message_id": message_id, "room_id": room_id, "entered_at": self._now(),
                                          "expire_at": self._expire_at()})
                except gexc.AlreadyExists:
                    continue
                return "not_cancelled", None
            if "actor" not in doc:
                try:
                    self._fs.update(ref, {"entered_at": self._now()}, since=snap)
                except gexc.FailedPrecondition:
                    continue
                return "not_cancelled", None
            if doc.get("ended_at") is not None:
                return "ended_before", doc
            try:
                # Kept as long as the cancellation asked (a cancel ends its message before its time, and a
                # copy that comes at its time must still find the mark), and the retention past now.
                kept = max(filter(None, (doc.get("expire_at"), self._expire_at())))
                self._fs.update(ref, {"ended_at": self._now(), "expire_at": kept}, since=snap)
            except gexc.FailedPrecondition:
                continue
            return "ended_now", doc
        raise gexc.Aborted(f"scheduled message {message_id!r}: its record kept changing")

    def dead_letters(self, room_id: str | None = None, limit: int = 100) -> list[tuple[str, dict[str, Any]]]:
        """Kept dead letters (`dead_letters/`), newest first: [(id, document)].
        With `room_id`, only that room's (an equality filter, sorted here: a
        room has few, and no composite index is needed)."""
        col = self._db.collection(DEAD_LETTERS)
        if room_id is not None:
            query = col.where(filter=FieldFilter("room_id", "==", room_id)).limit(limit)
            rows = [(s.id, s.to_dict() or {}) for s in self._fs.stream(query)]
            rows.sort(key=lambda r: r[1]["dead_lettered_at"], reverse=True)
        else:
            query = col.order_by("dead_lettered_at", direction=firestore.Query.DESCENDING).limit(limit)
            rows = [(s.id, s.to_dict() or {}) for s in self._fs.stream(query)]
        return rows

    def dead_letter(self, dead_letter_id: str) -> dict[str, Any] | None:
        """One kept dead letter, or None."""
        snap = self._fs.get(self._db.collection(DEAD_LETTERS).document(dead_letter_id))
        return snap.to_dict() if snap.exists else None

    def rejected(self, limit: int = 100) -> list[tuple[str, dict[str, Any]]]:
        """Kept rejected pushes (`rejected_messages/`), newest first: [(id, document)]."""
        query = (self._db.collection(REJECTED).order_by("rejected_at", direction=firestore.Query.DESCENDING)
                 .limit(limit))
        return [(s.id, s.to_dict() or {}) for s in self._fs.stream(query)]

    def rejected_one(self, key: str) -> dict[str, Any] | None:
        snap = self._fs.get(self._db.collection(REJECTED).document(key))
        return snap.to_dict() if snap.exists else None

    def claim_replay(self, key: str, actor: str) -> bool:
        """Mark a rejected push as being published again, once: a conditional
        write, so of two replays racing only one wins. Returns False if it is
        missing or already marked (nothing written)."""
        ref = self._db.collection(REJECTED).document(key)
        snap = self._fs.get(ref)
        if not snap.exists or (snap.to_dict() or {}).get("replayed_at") is not None:
            return False
        try:
            self._fs.update(ref, {"replayed_at": self._now(), "replayed_by": actor}, since=snap)
        except gexc.FailedPrecondition:
            return False
        return True

    def finish_replay(self, key: str, pubsub_message_id: str | None) -> None:
        """Record the id the replayed push was published under, or (None: the
        publish failed) lift the claim so the replay can be tried again."""
        ref = self._db.collection(REJECTED).document(key)
        if pubsub_message_id is None:
            self._fs.update(ref, {"replayed_at": None, "replayed_by": None})
        else:
            self._fs.update(ref, {"replayed_as": pubsub_message_id})
