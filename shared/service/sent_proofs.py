"""What a function instance knows, without a read, about the WhatsApp
attempts whose `sent` status could still prove something
(WHATSAPP_SENT_PROOF, shared/service/webhook.py): pure, in memory, no I/O.

A `sent` status changes what a room does only for an attempt whose send
outcome is not recorded as accepted (`awaits_platform_proof`). The webhook
learns that an attempt is past needing it, with no read, from its own
record: the attempts whose acceptance was written into their room (the
fallback blind write, `RoomStore.record_accepted`; since issue 46 an
accepted WhatsApp send's acceptance rides on its timer's task instead, and
that attempt stays unsettled, so that its `sent` status writes the echo
that makes a watchdog's wake-up of it, after a lost or late timer, time it
out rather than resend it), those whose
`delivered`, `read` or `failed` status it has seen (the ack ends the
message; the room's own rules take it from there), once the webhook has
applied them itself (WEBHOOK_MODE=direct, `settle_applied`; a queued status
settles nothing: `note_sent_proofs`). A `sent` that arrives
while more posts keep coming waits here until SEND_TIMEOUT_MS after its
attempt's start (`due_us`), so that its message's ack, usually a fraction
of a second behind it, can settle it first; only what is still unsettled
then costs the read of its room. Another instance's record is not seen:
with n webhook instances an ack meets its `sent` on the same one about 1/n
of the time.

The same record keeps the acks this instance applied (WEBHOOK_MODE=direct:
a `delivered` or `read` status whose transaction logged the message's
`acked` line in this instance, `ack_applied`): a later status of that
attempt (the `read` after the `delivered`, a duplicate) cannot change its
room, which answers it `status_ignored` with reason `after_acked`; the
webhook logs that line itself, without reading the room (`applied_ack`).
Trusted for ACK_MEMORY_US only: the room answers so as long as it remembers
the end (its last DEDUP_RETENTION ended messages, and its document until
its TTL, RETENTION_HOURS after it went idle): a minute is inside both for
any room that ends fewer than DEDUP_RETENTION messages a minute (17 a
second at the default 1,000), and beyond that the room would change nothing
either, only its line would say `not_in_flight`. With n webhook instances a status meets the instance
that applied its ack about 1/n of the time; the others read the room as
before.

Bounded: at most MAX_ENTRIES of each kind; the oldest go first (a lost
pending proof only brings back the resend it would have saved; a lost
applied ack, the read it would have saved).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from shared.events import DeliveryEvent, EventType, utc_iso

MAX_ENTRIES = 50_000
ACK_MEMORY_US = 60_000_000  # how long (us) an ack this instance applied stands for its room without a read
Attempt = tuple[str, int, int, int]  # room id, incarnation, seq, attempt


@dataclass(frozen=True)
class PendingProof:
    """A `sent` status waiting for its check: the attempt it names, the
    platform's stamp of it (epoch us), its message id and number, and when
    (epoch us) it is checked."""

    attempt: Attempt
    platform_ts_us: int
    provider_message_id: str | None
    number: str | None
    due_us: int


class SentProofRecord:
    """The attempts this instance knows need no proof, and the `sent`
    statuses waiting for their check. Thread-safe."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._max = max_entries
        # Keys: an Attempt (settled alone), or (room_id, incarnation, seq) (every attempt of the message).
        self._settled: OrderedDict[tuple[str | int, ...], None] = OrderedDict()
        self._pending: OrderedDict[Attempt, PendingProof] = OrderedDict()
        self.last_post_us: int | None = None  # when this instance's previous status post arrived
        self._acked: OrderedDict[Attempt, int] = OrderedDict()  # attempt -> when (epoch us) its ack was applied

    def settle(self, attempt: Attempt) -> None:
        """This attempt needs no proof: its send returned accepted and that
        was recorded, or a `failed` status of it came."""
        self._add_settled(attempt)

    def settle_message(self, room_id: str, incarnation: int, seq: int) -> None:
        """Every attempt of this message needs no proof: a `delivered` or
        `read` status of one of them came (it acks the message)."""
        self._add_settled((room_id, incarnation, seq))

    def _add_settled(self, key: tuple[str | int, ...]) -> None:
        with self._lock:
            self._settled[key] = None
            self._settled.move_to_end(key)
            while len(self._settled) > self._max:
                self._settled.popitem(last=False)

    def is_settled(self, attempt: Attempt) -> bool:
        """Whether this instance knows `attempt` needs no proof."""
        with self._lock:
            return attempt in self._settled or attempt[:3] in self._settled

    def ack_applied(self, attempt: Attempt, now_us: int) -> None:
        """This instance applied a `delivered` or `read` status of `attempt`
        at `now_us` (epoch us), and its transaction acked the message."""
        with self._lock:
            self._acked[attempt] = now_us
            self._acked.move_to_end(attempt)
            while len(self._acked) > self._max:
                self._acked.popitem(last=False)

    def acks_applied(self, attempts: list[Attempt], acked: frozenset[tuple[str, int, int]], now_us: int) -> None:
        """WEBHOOK_MODE=direct, once a request has applied a post's statuses:
        `attempts` are those of its `delivered` and `read` statuses, `acked`
        the messages (room, incarnation, seq) whose `acked` line applying
        them logged after its commit (shared/outbox.py `acked_here`, what it
        gained meanwhile). An attempt of an acked message had its ack
        applied here, at `now_us`."""
        for attempt in attempts:
            if attempt[:3] in acked:
                self.ack_applied(attempt, now_us)

    def applied_ack(self, attempt: Attempt, now_us: int) -> bool:
        """Whether this instance applied the ack of `attempt` (the same
        room, incarnation, seq and attempt) less than ACK_MEMORY_US before
        `now_us`: its room then answers any status of it `after_acked`."""
        with self._lock:
            at = self._acked.get(attempt)
            return at is not None and 0 <= now_us - at < ACK_MEMORY_US

    def wait(self, proof: PendingProof) -> None:
        """Keep `proof` until its due time (a repeat of it keeps the first)."""
        with self._lock:
            self._pending.setdefault(proof.attempt, proof)
            while len(self._pending) > self._max:
                self._pending.popitem(last=False)

    def take_due(self, now_us: int) -> list[PendingProof]:
        """The proofs due by `now_us` that are still unsettled, in the order
        they came, removed from the record (settled ones are dropped)."""
        with self._lock:
            due = [p for p in self._pending.values() if p.due_us <= now_us]
            for p in due:
                del self._pending[p.attempt]
            return [p for p in due if p.attempt not in self._settled and p.attempt[:3] not in self._settled]

    def pending(self) -> int:
        """How many proofs wait."""
        with self._lock:
            return len(self._pending)


def after_ack_line(attempt: Attempt, status: str, provider_message_id: str | None, now_us: int) -> DeliveryEvent:
    """The line a room logs for a status of `attempt` after its message's
    ack (shared/room/flight.py `_status_target`: `status_ignored`, reason
    `after_acked`, the status's attempt, status and message id, the room's
    incarnation), decided at `now_us` (epoch us) by the webhook."""
    room_id, incarnation, seq, number = attempt
    return DeliveryEvent(EventType.STATUS_IGNORED, utc_iso(now_us), "webhook", room_id, seq=seq, attempt=number,
                         status=status, provider_message_id=provider_message_id, reason=f"after_{EventType.ACKED}",
                         incarnation=incarnation)
