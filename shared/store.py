"""Firestore adapter: one transaction per room event, documents, op counters.

Layout (every document has a timestamp `expire_at`, the field of the TTL
policies that infra/ sets; TTL deletes within about 24 h of it):

- `rooms/{room_id}`: the room's whole state (see `shared.room.RoomState`):
  in-flight attempt, queue of pending messages with their bodies, dedup
  window, recent outcomes, counts. One document per room keeps a message at
  one write per transition: the queue lives beside the baton, so passing the
  baton and reading the next head are the same transaction.
- `rooms/{room_id}/sends/{seq}-{attempt}`: the send receipt, written blind
  (no read, no transaction) after the platform accepted a send. The ack-timeout
  handler reads it to tell "sent, no ack" (timed out) from "never sent" (resend).
- `rejected_messages/{pubsub_message_id}`: pushes that can never be valid,
  with their reason and raw content.
- `dead_letters/{room_id}:{seq}`: messages baton gave up on, with their body.

Only transactions touch `rooms/{room_id}`; nothing with a side effect runs in
the transaction function (it may run several times, see
https://cloud.google.com/firestore/docs/manage-data/transactions).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared.room import (
    Decision,
    InFlight,
    KeepDeadLetter,
    Phase,
    QueuedMessage,
    RoomEvent,
    RoomState,
)

ROOMS = "rooms"
SENDS = "sends"
REJECTED = "rejected_messages"
DEAD_LETTERS = "dead_letters"


@dataclass
class OpCounts:
    """Billable operations made while handling one request."""

    firestore_reads: int = 0
    firestore_writes: int = 0
    tasks_created: int = 0
    send_calls: int = 0


_current: ContextVar[OpCounts | None] = ContextVar("baton_op_counts", default=None)


def op_counts() -> OpCounts:
    """The counters of the request being handled (a throwaway one outside a request)."""
    counts = _current.get()
    if counts is None:
        counts = OpCounts()
        _current.set(counts)
    return counts


def begin_request() -> OpCounts:
    """Start counting a new request's operations; returns its counters."""
    counts = OpCounts()
    _current.set(counts)
    return counts


# ---------------------------------------------------------------- (de)serialise


def _message_to_doc(m: QueuedMessage) -> dict[str, Any]:
    return {
        "seq": m.seq,
        "message_id": m.message_id,
        "provider": m.provider,
        "recipient": m.recipient,
        "text": m.text,
        "published_at_us": m.published_at_us,
        "enqueued_at_us": m.enqueued_at_us,
    }


def _message_from_doc(d: dict[str, Any]) -> QueuedMessage:
    return QueuedMessage(
        seq=d["seq"],
        message_id=d["message_id"],
        provider=d["provider"],
        recipient=d["recipient"],
        text=d["text"],
        published_at_us=d["published_at_us"],
        enqueued_at_us=d["enqueued_at_us"],
    )


def room_to_doc(state: RoomState) -> dict[str, Any]:
    """The Firestore document of a room (without `expire_at`)."""
    flight = state.in_flight
    return {
        "next_seq": state.next_seq,
        "in_flight": None
        if flight is None
        else {
            "message": _message_to_doc(flight.message),
            "attempt": flight.attempt,
            "started_at_us": flight.started_at_us,
            "phase": str(flight.phase),
            "cause": flight.cause,
        },
        "pending": [_message_to_doc(m) for m in state.pending],
        "recent_ids": list(state.recent_ids),
        "ended": [{"seq": seq, "outcome": outcome} for seq, outcome in state.ended],
        "counts": dict(state.counts),
    }


def room_from_doc(room_id: str, d: dict[str, Any] | None) -> RoomState:
    """Inverse of `room_to_doc`; a missing document is a new, empty room."""
    if not d:
        return RoomState(room_id)
    f = d.get("in_flight")
    return RoomState(
        room_id=room_id,
        next_seq=d["next_seq"],
        in_flight=None
        if f is None
        else InFlight(
            message=_message_from_doc(f["message"]),
            attempt=f["attempt"],
            started_at_us=f["started_at_us"],
            phase=Phase(f["phase"]),
            cause=f["cause"],
        ),
        pending=tuple(_message_from_doc(m) for m in d.get("pending", [])),
        recent_ids=tuple(d.get("recent_ids", [])),
        ended=tuple((e["seq"], e["outcome"]) for e in d.get("ended", [])),
        counts=dict(d.get("counts", {})),
    )


# ---------------------------------------------------------------- the store


class RoomStore:
    """Rooms and their records in Firestore.

    Args:
        client: a `google.cloud.firestore.Client` (FIRESTORE_EMULATOR_HOST
            points it at the emulator).
        retention_hours: how far ahead `expire_at` is set on every write.
        max_attempts: transaction attempts before Firestore's contention error
            is raised (the client's default is 5).
    """

    def __init__(self, client: firestore.Client, retention_hours: int, max_attempts: int = 5) -> None:
        self._db = client
        self._retention = timedelta(hours=retention_hours)
        self._max_attempts = max_attempts

    def _expire_at(self) -> datetime:
        return datetime.now(UTC) + self._retention

    def room_ref(self, room_id: str) -> firestore.DocumentReference:
        return self._db.collection(ROOMS).document(room_id)

    def apply(self, room_id: str, decide_fn: Callable[[RoomState], Decision]) -> Decision:
        """Run `decide_fn` on the room's state in one transaction and commit
        what it decides.

        `decide_fn` may run several times (contention retries) and must be pure.
        Returns the decision of the attempt that committed.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore refused or
                was unreachable (the caller answers 5xx so the request is retried).
            ValueError: the transaction failed after `max_attempts` attempts.
        """
        ref = self.room_ref(room_id)
        counts = op_counts()
        outcome: list[Decision] = []

        @firestore.transactional
        def run(txn: firestore.Transaction) -> None:
            outcome.clear()
            snap = ref.get(transaction=txn)
            counts.firestore_reads += 1
            decision = decide_fn(room_from_doc(room_id, snap.to_dict() if snap.exists else None))
            if decision.state is not None:
                expire_at = self._expire_at()
                txn.set(ref, {**room_to_doc(decision.state), "expire_at": expire_at})
                for effect in decision.effects:
                    if isinstance(effect, KeepDeadLetter):
                        # Data, not a side effect: kept in the same transaction.
                        txn.set(self._dead_letter_ref(effect), self._dead_letter_doc(effect, expire_at))
            outcome.append(decision)

        run(self._db.transaction(max_attempts=self._max_attempts))
        decision = outcome[0]
        if decision.state is not None:
            counts.firestore_writes += 1 + sum(isinstance(e, KeepDeadLetter) for e in decision.effects)
        return decision

    def apply_event(self, room_id: str, event: RoomEvent, decide_fn: Callable[[RoomState, RoomEvent], Decision]) -> Decision:
        """`apply` for a fixed event: `decide_fn(state, event)`."""
        return self.apply(room_id, lambda state: decide_fn(state, event))

    # -- send receipts

    def _receipt_ref(self, room_id: str, seq: int, attempt: int) -> firestore.DocumentReference:
        return self.room_ref(room_id).collection(SENDS).document(f"{seq}-{attempt}")

    def write_receipt(self, room_id: str, seq: int, attempt: int, provider_message_id: str, sent_at: datetime) -> None:
        """Record that the platform accepted (seq, attempt). A blind write."""
        self._receipt_ref(room_id, seq, attempt).set(
            {"provider_message_id": provider_message_id, "sent_at": sent_at, "expire_at": self._expire_at()}
        )
        op_counts().firestore_writes += 1

    def has_receipt(self, room_id: str, seq: int, attempt: int) -> bool:
        """Whether (seq, attempt) has a send receipt."""
        snap = self._receipt_ref(room_id, seq, attempt).get()
        op_counts().firestore_reads += 1
        return snap.exists

    # -- kept records

    def _dead_letter_ref(self, effect: KeepDeadLetter) -> firestore.DocumentReference:
        return self._db.collection(DEAD_LETTERS).document(f"{effect.room_id}:{effect.message.seq}")

    @staticmethod
    def _dead_letter_doc(effect: KeepDeadLetter, expire_at: datetime) -> dict[str, Any]:
        return {
            "room_id": effect.room_id,
            "message": _message_to_doc(effect.message),
            "attempts": effect.attempts,
            "reason": effect.reason,
            "dead_lettered_at": datetime.now(UTC),
            "expire_at": expire_at,
        }

    def keep_rejected(self, key: str, reason: str, record: dict[str, Any]) -> None:
        """Keep a push that can never be valid, under `rejected_messages/{key}`."""
        self._db.collection(REJECTED).document(key).set(
            {**record, "reason": reason, "rejected_at": datetime.now(UTC), "expire_at": self._expire_at()}
        )
        op_counts().firestore_writes += 1

    # -- reading (tests, tools)

    def load_room(self, room_id: str) -> RoomState | None:
        """The stored room, or None. Outside any transaction."""
        snap = self.room_ref(room_id).get()
        return room_from_doc(room_id, snap.to_dict()) if snap.exists else None
