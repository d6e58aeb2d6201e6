"""The events a room decides on: pushes, send outcomes, statuses, receipts,
timers, the watchdog, operator actions and preparation results; and the
facts written outside the room's transaction (`RoomFact`), which the store
adapter reads back and applies before the event being decided.

Each is plain data with its idempotency key. Must not decide anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.room.state import QueuedMessage, SendOutcome


class _PushedContent:
    """What a push (`Enqueue`) and its dead-letter copy (`Park`) share: the
    message's content fields, as `QueuedMessage` names them."""

    provider: str
    recipient: str
    text: str
    published_at_us: int
    media_kind: str | None
    media_link: str | None
    prepare: str | None
    sequence: int | None

    sender: str | None
    default_sender: str | None
    payload: str | None

    @property
    def content(self) -> dict[str, Any]:
        """The message's fields as `QueuedMessage` names them; its `sender`
        is the room's to decide (shared/room/entry.py, `sender_for`)."""
        return {"provider": self.provider, "recipient": self.recipient, "text": self.text,
                "published_at_us": self.published_at_us, "media_kind": self.media_kind,
                "media_link": self.media_link, "prepare": self.prepare, "sequence": self.sequence,
                "payload": self.payload}

@dataclass(frozen=True)
class Enqueue(_PushedContent):
    """A push of one producer message (already validated)."""

    message_id: str
    provider: str
    recipient: str
    text: str
    published_at_us: int
    at_us: int
    media_kind: str | None = None
    media_link: str | None = None
    prepare: str | None = None
    sequence: int | None = None
    sender: str | None = None  # the producer's `sender` attribute (a WhatsApp phone-number id)
    default_sender: str | None = None  # the room's number by rendezvous hash (shared/senders.py)
    payload: str | None = None  # the `data` as JSON text when text and media fields cannot carry it

    @property
    def idempotency_key(self) -> str:
        return f"push:{self.message_id}"

@dataclass(frozen=True)
class Park(_PushedContent):
    """The dead-letter topic's copy of a message Pub/Sub gave up delivering:
    put it at its place in the room, parked with `reason`."""

    message_id: str
    provider: str
    recipient: str
    text: str
    published_at_us: int
    at_us: int
    reason: str
    media_kind: str | None = None
    media_link: str | None = None
    prepare: str | None = None
    sequence: int | None = None
    sender: str | None = None
    default_sender: str | None = None
    payload: str | None = None

    @property
    def idempotency_key(self) -> str:
        return f"park:{self.message_id}"

@dataclass(frozen=True)
class SendReturned:
    """A send call for (seq, attempt) returned at `at_us` with `outcome`.

    `permanent` (for REFUSED): retrying cannot help (e.g. WhatsApp 131026);
    `rate_limited`: the platform's per-recipient pair rate limit (WhatsApp
    131056: wait 4^n s before the n-th retry,
    https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
    `cause` is the idempotency key of the request that started the attempt.
    `sender_busy_until_us` (with REFUSED): no call was made, the sender's
    number had no free slot this second (shared/sender_window.py); the
    message waits until then as a paced one, keeping its attempt number
    (never sent).
    """

    incarnation: int
    seq: int
    attempt: int
    outcome: SendOutcome
    at_us: int
    cause: str
    permanent: bool = False
    rate_limited: bool = False
    error_code: int | None = None
    error_title: str | None = None
    provider_message_id: str | None = None
    sender_busy_until_us: int | None = None

    @property
    def idempotency_key(self) -> str:
        return self.cause

@dataclass(frozen=True)
class StatusUpdate:
    """A platform status for one attempt: `sent`, `delivered`, `read` or `failed`.

    `sent_at_us` is the attempt's start, decoded from the delivery id;
    `at_us` is when it is decided (now); `received_at_us`, when the webhook
    received it, if earlier (a status that waited in the status queue): the
    ack latency is measured to it, the decision is made at `at_us`.
    `sender`: the WhatsApp phone-number id the status came from
    (`value.metadata.phone_number_id`), None when not said. A status of the
    in-flight attempt from another number than the one that attempt went
    out from (`InFlight.number`) is ignored (`wrong_sender`).
    """

    incarnation: int
    seq: int
    attempt: int
    status: str
    sent_at_us: int
    at_us: int
    provider_message_id: str | None = None
    error_code: int | None = None
    error_title: str | None = None
    received_at_us: int | None = None
    sender: str | None = None

    @property
    def seen_at_us(self) -> int:
        """When the platform's status reached baton (epoch us)."""
        return self.at_us if self.received_at_us is None else self.received_at_us

    @property
    def idempotency_key(self) -> str:
        return f"status:{self.incarnation}.{self.seq}.{self.attempt}:{self.status}"

@dataclass(frozen=True)
class RecipientReceipt:
    """A receipt that names the recipient, not our delivery id: Messenger's
    `message_deliveries` / `message_reads` (a `watermark_us`: every message
    the platform stamped before it was delivered / read, and maybe `mids`),
    Instagram's `messaging_seen` (one mid, no watermark). `status` is
    `delivered` or `read`. Applied to each room whose in-flight message goes
    to that recipient of that provider. `at_us`: when it is decided (now);
    `received_at_us`: when the webhook received it, if earlier (queued).
    """

    provider: str
    recipient: str
    status: str
    watermark_us: int | None
    mids: tuple[str, ...]
    at_us: int
    received_at_us: int | None = None

    @property
    def seen_at_us(self) -> int:
        """When the platform's receipt reached baton (epoch us)."""
        return self.at_us if self.received_at_us is None else self.received_at_us

    @property
    def idempotency_key(self) -> str:
        return f"receipt:{self.provider}:{self.recipient}:{self.status}:{self.watermark_us}:{','.join(self.mids)[:200]}"

@dataclass(frozen=True)
class TimerFired:
    """A Cloud Tasks timer for (incarnation, seq, attempt), due at `due_at_us`, came.

    `accepted_deadline_us` (epoch us): the ack deadline of the attempt's send,
    which the service that armed the timer saw accepted (WhatsApp,
    `ScheduleTimer.accepted_deadline_us`); None: none seen. Not part of the
    idempotency key (a redelivery's re-arm of the same timer, which carries
    none, has the same task name)."""

    incarnation: int
    seq: int
    attempt: int
    due_at_us: int
    at_us: int
    accepted_deadline_us: int | None = None

    @property
    def idempotency_key(self) -> str:
        return f"timer:{self.incarnation}.{self.seq}.{self.attempt}@{self.due_at_us}"

@dataclass(frozen=True)
class WatchdogSweep:
    """The watchdog found the room's wake-up overdue by more than the grace period."""

    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"sweep:{self.at_us}"

@dataclass(frozen=True)
class Redrive:
    """An operator releases the parked message `seq`: it is sent in its turn.

    With `message` (and the room `incarnation` it was kept under), a message
    baton dead-lettered (`dead_letters/`) goes back to the head of the queue,
    if the room's last end of that message is `dead_lettered`.
    """

    seq: int
    actor: str
    reason: str
    at_us: int
    message: QueuedMessage | None = None
    incarnation: int = 0

    @property
    def idempotency_key(self) -> str:
        return f"redrive:{self.seq}"

@dataclass(frozen=True)
class Skip:
    """An operator ends message `seq` (in flight or queued) unsent, as `skipped`."""

    seq: int
    actor: str
    reason: str
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"skip:{self.seq}"

@dataclass(frozen=True)
class Pause:
    """An operator holds the room: nothing new starts until `Resume`."""

    actor: str
    reason: str
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"pause:{self.at_us}"

@dataclass(frozen=True)
class Resume:
    """An operator lets a paused room go on: its head starts."""

    actor: str
    reason: str
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"resume:{self.at_us}"

@dataclass(frozen=True)
class Prepared:
    """Attempt `attempt` of message `seq`'s preparation finished: `media_id`
    is the platform's id of the uploaded media; it took `took_ms` ms."""

    incarnation: int
    seq: int
    attempt: int
    media_id: str
    took_ms: float
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"prepared:{self.incarnation}.{self.seq}.{self.attempt}"

@dataclass(frozen=True)
class PrepareFailed:
    """Attempt `attempt` of message `seq`'s preparation failed with `error`;
    `permanent`: trying again cannot help (the media is missing, too big, of
    a refused type)."""

    incarnation: int
    seq: int
    attempt: int
    error: str
    permanent: bool
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"prepare_failed:{self.incarnation}.{self.seq}.{self.attempt}"

@dataclass(frozen=True)
class AcceptanceRecorded:
    """A fact written outside the room's transaction: the platform accepted
    the send of attempt (incarnation, seq, attempt), held until
    `deadline_us` (epoch us: ACK_TIMEOUT_MS after the call returned). One
    blind write of the room document's `accepted` map
    (`RoomStore.record_accepted`: WhatsApp, at an ack level other than
    `accepted`), read back with the room and applied before the event being
    decided (docs/architecture.md, "Writes outside the transaction").
    `at_us`: when the room reads it (epoch us)."""

    incarnation: int
    seq: int
    attempt: int
    deadline_us: int
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"accepted:{self.incarnation}.{self.seq}.{self.attempt}"

@dataclass(frozen=True)
class EchoRecorded:
    """A fact written outside the room's transaction: the platform's own
    record of our send of attempt (incarnation, seq, attempt), a Messenger
    or Instagram message echo or a WhatsApp `sent` status
    (WHATSAPP_SENT_PROOF=on): its stamp `platform_ts_us` (epoch us, the
    platform's clock), its message id, and the WhatsApp phone-number id it
    names (`number`; None: not named). One blind write of the room
    document's `echoes` map (`RoomStore.record_echo`), read back and applied
    as `AcceptanceRecorded` is. `at_us`: when the room reads it (epoch us)."""

    incarnation: int
    seq: int
    attempt: int
    platform_ts_us: int
    provider_message_id: str | None
    number: str | None
    at_us: int

    @property
    def idempotency_key(self) -> str:
        return f"echo:{self.incarnation}.{self.seq}.{self.attempt}"

RoomFact = AcceptanceRecorded | EchoRecorded
"""A fact written outside the room's transaction, applied before the event being decided."""

RoomEvent = (Enqueue | Park | SendReturned | StatusUpdate | RecipientReceipt | TimerFired | WatchdogSweep | Redrive
             | Skip | Pause | Resume | Prepared | PrepareFailed | AcceptanceRecorded | EchoRecorded)
