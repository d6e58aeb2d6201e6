"""The rulebook of one room: `decide(state, event, policy, component) -> Decision`.

No I/O happens here. The store adapter (shared/store.py) reads a room's state,
calls `decide`, and commits the new state with a conditional write (an
optimistic transaction); only after the commit does the service run the
effects (arm a timer, send a message) and log the events. The
read-decide-write loop may run several times, so effects are data until then.

The baton: a room has at most one message in flight. Its queue (`pending`)
holds the later messages in the order they entered the room. A message ends
exactly once: acked, failed, timed out, dead-lettered or skipped. When the
in-flight message ends, the head of the queue starts in the same transaction,
so a room never idles while it holds a sendable message (no lost wake-up).

An attempt (one send of one message) goes through these phases:

    SENDING --send returned: accepted--> SENT    --deadline, no ack--> timed out
            --send returned: unknown---> UNKNOWN --deadline, no ack--> resent
            --send returned: refused---> BACKOFF --retry due---------> resent
            --no outcome recorded by the send window's end-----------> resent

A delivered/read status for any attempt of the in-flight message acks it, in
any phase. The ack deadline of SENT and UNKNOWN is measured from when the send
call *returned*, so a message is held at least `ack_timeout_ms` after the
platform could have had it. A send call may only start within
`send_start_deadline_ms` of its decision and lasts at most `send_timeout_ms`,
so an attempt whose outcome was never recorded (a crash) is past any possible
send at `started + start deadline + send timeout`, and is held `ack_timeout_ms`
beyond that before it is resent.

Wake-ups: every waiting attempt has `due_at_us`, the time its timer task is
due, stored as the room's top-level `wake_at_us`. A timer that comes before
the room's deadline arms a new one for the rest; the watchdog sweep re-drives
rooms whose wake-up is overdue (a timer that could not be armed, or was lost).

Fencing: a timer or status names (incarnation, seq, attempt). The attempt is
the fencing token of a send; the incarnation (the room document's creation
time, epoch us) tells an old room from a new one with the same id after TTL
deleted the first.

Parking: a push refused under back-pressure is remembered (`awaiting`) at its
place. Pub/Sub delivers a room's messages one at a time in order, so when a
later message of the room arrives, the awaited one has been dead-lettered: it
gets a placeholder at its place in the queue, and its copy from the dead-letter
topic fills it (`Park`). A parked message at the head blocks the room (visibly,
`blocked_reason`) until an operator redrives it or skips it.

Operators (shared/operators.py, the `baton` CLI) act through events of this
rulebook like everything else, each in one transaction, each logged with its
actor and reason, each a no-op the second time:

- `Pause`: nothing new starts (the queue keeps accepting messages); a message
  already in flight ends by its own rules (ack, timeout, failure, its
  resends). `Resume` starts the head again.
- `Skip`: the message ends as `skipped`. A queued one leaves the queue; the
  in-flight one passes the baton at once, unless its send call may still be
  under way (SENDING, inside the send window): then, as for `acked_early`,
  the baton passes only once that call cannot go out any more, so no copy of
  the skipped message can follow the next one.
- `Redrive`: a parked message is released in its place; a message baton
  dead-lettered (kept in `dead_letters/`) goes back to the head of the queue,
  ahead of every message that came after it (by seq), and is sent as soon as
  nothing is in flight.

Times are epoch microseconds (`*_us`) inside the state and events; policy
durations are milliseconds (`*_ms`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from shared import docsize
from shared.events import DeliveryEvent, EventType, utc_iso

if TYPE_CHECKING:
    from shared.config import Settings

ROOMS = "rooms"


class Phase(StrEnum):
    """Where the in-flight attempt stands."""

    SENDING = "sending"  # decided; the send call may be under way; no outcome recorded
    SENT = "sent"  # the platform accepted the send; held until an ack or the ack deadline
    UNKNOWN = "unknown"  # the send's outcome is unknown: possibly sent; held like SENT, then resent
    BACKOFF = "backoff"  # provably not sent; waiting for the retry
    PACED = "paced"  # not sent yet: waiting for a token of the room's pair-rate bucket
    PREPARING = "preparing"  # not sent yet: waiting for the message's preparation (a media upload)


class SendOutcome(StrEnum):
    """What a send call's caller knows when it returns (mirrors shared.providers)."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    UNKNOWN = "unknown"


class Trigger(StrEnum):
    """What freed the room to send (the `trigger` of `sent` events)."""

    ENQUEUE = "enqueue"
    ACK = "ack"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"
    REDRIVE = "redrive"
    RESUME = "resume"
    RETRY = "retry"  # after a refused send's backoff
    RESEND = "resend"  # after an unknown outcome's deadline
    PACED = "paced"  # a token of the room's pair-rate bucket came
    PREPARED = "prepared"  # the head's preparation finished


class IgnoreReason(StrEnum):
    """Why an event changed nothing (the `reason` of `*_ignored` events)."""

    DUPLICATE_PUSH = "duplicate_push"
    SENT_STATUS = "sent_status"
    UNKNOWN_DELIVERY = "unknown_delivery"
    STALE_INCARNATION = "stale_incarnation"
    NOT_IN_FLIGHT = "not_in_flight"
    LATE_ACK = "late_ack"
    FAILED_FOR_OLDER_ATTEMPT = "failed_for_older_attempt"
    UNKNOWN_STATUS = "unknown_status"
    SUPERSEDED_TIMER = "superseded_timer"
    STALE_SEND_OUTCOME = "stale_send_outcome"
    NOT_OVERDUE = "not_overdue"
    NOT_PARKED = "not_parked"
    NO_BODY = "no_body_yet"
    NOT_HELD = "not_held"
    ACKED_WHILE_RESENDING = "acked_while_resending"
    ALREADY_PAUSED = "already_paused"
    NOT_PAUSED = "not_paused"
    ALREADY_ENDED = "already_ended"  # skipped, or acked while its resend is being sent
    ALREADY_HELD = "already_held"  # a dead letter redriven already: the room holds it again
    NOT_DEAD_LETTERED = "not_dead_lettered"  # the room remembers no dead-lettered end of that message
    BELOW_ACK_LEVEL = "below_ack_level"  # e.g. `delivered` where the provider's ack level is `read`
    RECEIPT_COVERS_NOTHING = "receipt_covers_nothing_in_flight"  # a watermark or mids that prove nothing here
    ALREADY_PREPARED = "already_prepared"  # a second result of a preparation: the room keeps the first
    STALE_PREPARE_ATTEMPT = "stale_prepare_attempt"  # a failure of an attempt a later one has replaced


@dataclass(frozen=True)
class QueuedMessage:
    """An accepted message. `text` is the body (a media message's caption,
    maybe empty), never logged; None for a placeholder whose dead-lettered
    copy has not arrived. `parked` is why the message waits for an operator
    (None: it is sent in its turn).

    - `media_kind`, `media_link`: a media message (`image`) and where its
      file is fetched from; None for a text message.
    - `prepare`: the preparation it needs before it can be sent (`media`:
      upload the file to the platform, send by the media id), or None.
    - `prepared`: the preparation's result (the platform's media id), once
      stored; `prep_attempt`: preparation attempts requested so far (0: none);
      `prep_failed`: why its preparation was given up (MAX_PREPARE_ATTEMPTS),
      so it ends by PREPARE_POISON when it reaches the head.
    - `sequence`: the producer's `sequence` attribute (from 1), or None.
    - `attempts`: send attempt numbers this message has already taken in
      this room incarnation (0: none): its next flight starts at
      `attempts + 1`, so an attempt number, the fencing token of a send, is
      never used twice for it, across pause, resume, redrive and preparation;
      `attempt_floor`: `attempts` at its latest operator redrive:
      MAX_SEND_ATTEMPTS counts the attempts above it.
    - `prep_floor`: `prep_attempt` at its latest redrive: the preparation
      attempts above it count against MAX_PREPARE_ATTEMPTS, and every
      preparation requested gets a number (a task name) never used before.
    """

    seq: int
    message_id: str
    provider: str
    recipient: str
    text: str | None
    published_at_us: int
    enqueued_at_us: int
    parked: str | None = None
    media_kind: str | None = None
    media_link: str | None = None
    prepare: str | None = None
    prepared: str | None = None
    prep_attempt: int = 0
    prep_failed: str | None = None
    sequence: int | None = None
    attempts: int = 0
    attempt_floor: int = 0
    prep_floor: int = 0

    @property
    def needs_preparation(self) -> bool:
        """Whether it must still be prepared before it can be sent."""
        return self.prepare is not None and self.prepared is None

    @property
    def next_attempt(self) -> int:
        """The attempt number its next flight starts with."""
        return self.attempts + 1

    @property
    def preparation_asked(self) -> bool:
        """Whether a preparation was requested since its latest (re)entry."""
        return self.prep_attempt > self.prep_floor


@dataclass(frozen=True)
class InFlight:
    """The one message of a room that holds the baton, as attempt `attempt`.

    - `started_at_us`: when the attempt was decided (its send may start within
      `send_start_deadline_ms` of it).
    - `due_at_us`: when its timer task is due (the room's wake-up).
    - `deadline_us`: when the attempt's wait ends (ack deadline for SENT and
      UNKNOWN, retry time for BACKOFF); None while SENDING.
    - `idempotency_key`: the request that started this attempt; a redelivery of
      that request re-arms the timer (its first delivery may have died between
      the commit and the effects).
    - `acked_early`: the status (`delivered`/`read`) of an EARLIER attempt that
      acked the message while this one was being sent. The message has
      reached the device, but this attempt's send call may still go out: the
      baton passes only once it cannot (its outcome came, or its send window
      is over), so no copy of it can follow the next message.
    - `skipped`: an operator skipped the message while this attempt's send
      may still go out: it has ended (logged, counted), and the baton passes
      the same way as for `acked_early`.
    - `provider_message_id`, `returned_at_us`: the platform's id of this
      attempt and when its send call returned (epoch us), once recorded by a
      transaction (providers whose receipts do not carry our delivery id:
      Messenger, Instagram); None for WhatsApp's blind-written acceptance.
    - `early_mids`, `early_mids_status`: message ids a recipient receipt
      named while this attempt's send call had not returned yet; if the call
      returns with one of them, the message is acked at once.
    """

    message: QueuedMessage
    attempt: int
    started_at_us: int
    phase: Phase
    due_at_us: int
    idempotency_key: str
    deadline_us: int | None = None
    acked_early: str | None = None
    skipped: bool = False
    provider_message_id: str | None = None
    returned_at_us: int | None = None
    early_mids: tuple[str, ...] = ()
    early_mids_status: str | None = None


@dataclass(frozen=True)
class Ended:
    """A message that ended: kept for de-duplication and late statuses.
    `attempts`: for a dead-lettered message, the send attempt numbers it
    took (a redrive goes on above them); 0 otherwise."""

    seq: int
    message_id: str
    outcome: str
    attempts: int = 0


@dataclass(frozen=True)
class Paused:
    """An operator's pause of a room: who, why, and when (epoch us)."""

    actor: str
    reason: str
    at_us: int


@dataclass(frozen=True)
class RoomState:
    """Everything baton keeps about one room (one Firestore document).

    - `incarnation`: creation time of the document (epoch us); 0 = not stored.
    - `next_seq`: the seq the next accepted message gets (from 1).
    - `ended`: the last `Policy.dedup_retention` ended messages, oldest first.
    - `awaiting`: (message_id, published_at_us) of pushes refused under
      back-pressure and not accepted since, in arrival order.
    - `counts`: how many messages ended each way.
    - `paused`: set while an operator holds the room: nothing new starts.
    - `pace_tokens`, `pace_at_us`: the room's token bucket for the
      provider's pair rate (`Policy.pacing`), as of `pace_at_us`.
    - `next_sequence`: the producer `sequence` the room expects next (from 1);
      `held`: messages whose `sequence` is beyond it, in sequence order,
      waiting outside the queue (seq 0 until they enter); `gap_due_us`:
      when the room stops waiting for the missing ones (its gap timer).
    """

    room_id: str
    incarnation: int = 0
    next_seq: int = 1
    in_flight: InFlight | None = None
    pending: tuple[QueuedMessage, ...] = ()
    ended: tuple[Ended, ...] = ()
    awaiting: tuple[tuple[str, int], ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    paused: Paused | None = None
    pace_tokens: float | None = None  # the pair-rate bucket: None = full (a new room)
    pace_at_us: int = 0  # when `pace_tokens` was last brought up to date (epoch us)
    next_sequence: int = 1
    held: tuple[QueuedMessage, ...] = ()
    gap_due_us: int | None = None

    @property
    def wake_at_us(self) -> int | None:
        """When the room must be woken (its in-flight timer's or its gap
        timer's due time, the earlier), or None."""
        due = [t for t in (self.in_flight.due_at_us if self.in_flight is not None else None,
                           self.gap_due_us if self.held else None) if t is not None]
        return min(due) if due else None

    @property
    def blocked_reason(self) -> str | None:
        """Why the room sends nothing although it holds messages, or None."""
        if self.in_flight is None and self.pending and self.paused is not None:
            return f"paused by {self.paused.actor}: {self.paused.reason}"
        if self.in_flight is None and self.pending and self.pending[0].parked:
            return f"seq {self.pending[0].seq} ({self.pending[0].message_id}) is parked: {self.pending[0].parked}"
        return None

    @property
    def head_since_us(self) -> int | None:
        """When the head of line (the in-flight message, else the first queued
        one) entered the room (epoch us), or None: the room's lag is now minus this."""
        if self.in_flight is not None:
            return self.in_flight.message.enqueued_at_us
        return self.pending[0].enqueued_at_us if self.pending else None

    @property
    def holds_messages(self) -> bool:
        return self.in_flight is not None or bool(self.pending) or bool(self.awaiting) or bool(self.held)

    def held_ids(self) -> set[str]:
        ids = {m.message_id for m in self.pending} | {m.message_id for m in self.held}
        if self.in_flight is not None:
            ids.add(self.in_flight.message.message_id)
        return ids

    def message(self, seq: int) -> tuple[QueuedMessage, int | None] | None:
        """Message `seq` the room holds (in flight, or queued) and its index in
        the queue (None: in flight), or None."""
        if self.in_flight is not None and self.in_flight.message.seq == seq:
            return self.in_flight.message, None
        return next(((m, i) for i, m in enumerate(self.pending) if m.seq == seq), None)

    def outcome_of(self, seq: int) -> str | None:
        for e in reversed(self.ended):
            if e.seq == seq:
                return e.outcome
        return None


@dataclass(frozen=True)
class Policy:
    """The knobs `decide` needs; built from shared.config.Settings. Times in ms.

    - `first_timer_slack_ms`: the first timer of an attempt is due this long
      after `started + ack_timeout`, so a send that returns within it needs no
      second timer (the deadline counts from the send's return).
    - `ack_levels`: per provider, what acks a message (`ack_level`).
    - `pacing`: per provider, a token bucket per room: one token every
      `interval_ms`, at most `burst` kept; a send takes one. WhatsApp's pair
      rate limit is about one message every 6 s to one user, with bursts of
      up to 45 borrowed against later time (error 131056; ../shared/DESIGN.md,
      "WhatsApp Cloud API").
    - `watermark_margin_ms`: a watermark receipt (Messenger) acks the
      in-flight message only if it is at least this far past the moment its
      send call returned: the platform stamps a message between the call's
      start and return, so a watermark at or after the return covers it; the
      margin covers the platform's clock running ahead of ours by as much.
    - `prepare_ahead`: besides the head of line, how many queued messages
      may be prepared at once (0: only the head, one after another);
      `prepare_timeout_ms`: how long the head waits for a preparation result
      before asking again; `max_prepare_attempts`, `prepare_retry_base_ms`
      (x4 per attempt): retries of a failed preparation; `prepare_poison`:
      `dead_letter` or `park`, what a message whose preparation was given up
      does when it reaches the head.
    - `max_room_bytes`: Firestore storage size of the room document (see
      shared/docsize.py) above which a new message is refused; the rest up to
      1 MiB is the reserve for placeholders and markers, which are never refused.
    """

    ack_timeout_ms: int = 3000
    send_timeout_ms: int = 2000
    send_start_deadline_ms: int = 2000
    first_timer_slack_ms: int = 250
    max_send_attempts: int = 5
    send_retry_base_ms: int = 1000
    dedup_retention: int = 1000
    max_queued_messages: int = 1000
    max_room_bytes: int = 900_000
    watchdog_grace_ms: int = 60_000
    ack_levels: tuple[tuple[str, str], ...] = ()  # (provider, level); level in ACK_LEVELS, default `delivered`
    watermark_margin_ms: int = 0
    pacing: tuple[tuple[str, int, int], ...] = ()  # (provider, ms per token, burst); absent or 0 ms: off
    prepare_ahead: int = 8
    prepare_timeout_ms: int = 30_000
    max_prepare_attempts: int = 4
    prepare_retry_base_ms: int = 1000
    prepare_poison: str = "dead_letter"  # or "park"
    sequence_gap_timeout_ms: int = 30_000

    def pace(self, provider: str) -> tuple[int, int]:
        """(ms per token, burst) of `provider`'s pair-rate bucket; (0, 0) is off."""
        for name, interval_ms, burst in self.pacing:
            if name == provider and interval_ms > 0 and burst > 0:
                return interval_ms, burst
        return 0, 0

    def ack_level(self, provider: str) -> str:
        """What acks a message of `provider`: `delivered` (delivered or read),
        `read` (read only), or `accepted` (the send call's 2xx). The ack
        timeout is the backstop of every level."""
        return dict(self.ack_levels).get(provider, "delivered")

    @property
    def send_window_ms(self) -> int:
        """ms after an attempt's decision by which its send call has surely returned."""
        return self.send_start_deadline_ms + self.send_timeout_ms


# ---------------------------------------------------------------- events in


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

    @property
    def content(self) -> dict[str, Any]:
        return {"provider": self.provider, "recipient": self.recipient, "text": self.text,
                "published_at_us": self.published_at_us, "media_kind": self.media_kind,
                "media_link": self.media_link, "prepare": self.prepare, "sequence": self.sequence}


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
    """A Cloud Tasks timer for (incarnation, seq, attempt), due at `due_at_us`, came."""

    incarnation: int
    seq: int
    attempt: int
    due_at_us: int
    at_us: int

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


RoomEvent = (Enqueue | Park | SendReturned | StatusUpdate | RecipientReceipt | TimerFired | WatchdogSweep | Redrive
             | Skip | Pause | Resume | Prepared | PrepareFailed)

# The reason a message parked because its preparation was given up starts with this.
PREPARE_PARK_REASON = "preparation failed"

PAUSED = EventType.PAUSED
RESUMED = EventType.RESUMED

ACK_STATUSES = frozenset({"delivered", "read"})
ACK_LEVELS = ("delivered", "read", "accepted")


def acks(level: str, status: str) -> bool:
    """Whether a platform status acks a message under ack level `level`."""
    if level == "read":
        return status == "read"
    return level == "delivered" and status in ACK_STATUSES


# ---------------------------------------------------------------- effects out


@dataclass(frozen=True)
class Send:
    """Send `message` as `attempt`, if the call can start by `start_by_us`.

    `trigger` names what freed the room; `trigger_at_us` is when that request
    arrived; `cause` is its idempotency key (carried into `SendReturned`)."""

    room_id: str
    incarnation: int
    message: QueuedMessage
    attempt: int
    delivery_id: str
    trigger: Trigger
    trigger_at_us: int
    start_by_us: int
    cause: str


@dataclass(frozen=True)
class ScheduleTimer:
    """Arm a Cloud Tasks timer for (incarnation, seq, attempt) due at `due_at_us`."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int


@dataclass(frozen=True)
class CancelTimer:
    """Delete the still-pending timer task of (incarnation, seq, attempt) due at
    `due_at_us`: its attempt has ended before the timer was due (an ack, a
    failure, a skip). Saves the task's dispatch and the `timeout` call that
    would only log `timeout_ignored`. Best effort: a timer that is not deleted
    fires and is ignored, as every stale timer is."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int


@dataclass(frozen=True)
class Prepare:
    """Ask the `prepare` function to prepare message `seq` (attempt
    `attempt` of its preparation), at `due_at_us` (now, or after a failed
    attempt's backoff): a Cloud Tasks task whose name derives from (room,
    incarnation, seq, attempt), so asking twice makes one task on the real
    service, and a preparation that runs twice uploads twice at worst (the
    room keeps the first result)."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int


@dataclass(frozen=True)
class KeepDeadLetter:
    """A message baton gave up on, with its body, kept for a later redrive.
    Data written in the same transaction as the room (`Decision.dead_letters`),
    not an effect run after the commit."""

    room_id: str
    incarnation: int
    message: QueuedMessage
    attempts: int
    reason: str


Effect = Send | ScheduleTimer | CancelTimer | Prepare


@dataclass(frozen=True)
class Decision:
    """The result of one event: the new state (None: nothing to write), the
    effects to run after the commit, and the events to log after the commit.
    `refused` is set when the room pushes back (room full): the push is
    answered 503 so Pub/Sub redelivers later; `state` may still carry the
    marker that remembers it. `dead_letters` are written with the room, in
    its transaction."""

    state: RoomState | None
    effects: tuple[Effect, ...] = ()
    events: tuple[DeliveryEvent, ...] = ()
    refused: str | None = None
    dead_letters: tuple[KeepDeadLetter, ...] = ()


# ---------------------------------------------------------------- delivery ids


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def make_delivery_id(room_id: str, incarnation: int, seq: int, attempt: int, started_at_us: int) -> str:
    """Our id of one attempt: `"{seq}.{attempt}.{started_ms}.{incarnation_b36}.{room_id}"`.

    It travels as WhatsApp's `biz_opaque_callback_data` (at most 512 characters,
    https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages)
    and comes back in every status webhook, so a status names its room,
    incarnation and attempt without a lookup, and a late ack still knows its
    send time.
    """
    return f"{seq}.{attempt}.{started_at_us // 1000}.{_b36(incarnation)}.{room_id}"


def parse_delivery_id(delivery_id: object) -> tuple[str, int, int, int, int]:
    """Inverse of `make_delivery_id`: (room_id, incarnation, seq, attempt, started_at_us).

    Raises:
        ValueError: not a delivery id baton made (or not a string at all).
    """
    if not isinstance(delivery_id, str):
        raise ValueError(f"not a baton delivery id: {delivery_id!r:.80}")
    parts = delivery_id.split(".", 4)
    if len(parts) != 5 or not parts[4]:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    seq, attempt, started_ms = (int(p) for p in parts[:3])
    incarnation = int(parts[3], 36)
    if seq < 1 or attempt < 1 or incarnation < 1:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    return parts[4], incarnation, seq, attempt, started_ms * 1000


# ---------------------------------------------------------------- stored form


# Optional fields of a stored message: (stored name, attribute); absent when unset.
_OPTIONAL_MESSAGE_FIELDS = (("parked", "parked"), ("media", "media_kind"), ("link", "media_link"),
                            ("prepare", "prepare"), ("prepared", "prepared"), ("prep_n", "prep_attempt"),
                            ("prep_failed", "prep_failed"), ("pseq", "sequence"), ("att_n", "attempts"),
                            ("att_floor", "attempt_floor"), ("prep_floor", "prep_floor"))


def message_to_doc(m: QueuedMessage) -> dict[str, Any]:
    """The stored form of one message (in a room document or a dead letter).
    Fields a text message does not use are left out (a room holds up to
    MAX_QUEUED_MESSAGES of them)."""
    doc: dict[str, Any] = {"seq": m.seq, "id": m.message_id, "provider": m.provider, "to": m.recipient,
                           "text": m.text, "pub_us": m.published_at_us, "enq_us": m.enqueued_at_us}
    for stored, attr in _OPTIONAL_MESSAGE_FIELDS:
        value = getattr(m, attr)
        if value is not None and value != 0:
            doc[stored] = value
    return doc


def message_from_doc(d: dict[str, Any]) -> QueuedMessage:
    """Inverse of `message_to_doc`."""
    optional = {attr: d[stored] for stored, attr in _OPTIONAL_MESSAGE_FIELDS if stored in d}
    return QueuedMessage(d["seq"], d["id"], d["provider"], d["to"], d["text"], d["pub_us"], d["enq_us"],
                         **optional)


def room_to_doc(state: RoomState) -> dict[str, Any]:
    """The Firestore fields of a room (the store adds `expire_at`).

    `wake_at_us` is top level and indexed: the watchdog's query. The queue,
    the ended list and the counts are exempt from indexing (infra/).
    Ended messages are stored as `"{seq} {outcome} {message_id}"` strings
    (a dead-lettered one adds `" {attempts}"`):
    message ids have no spaces (shared/push.py), and a string costs less than
    a map of three named fields.

    Top-level scalars the operators' queries use (single-field indexes, which
    Firestore keeps automatically): `head_since_us` (lag listing), `parked`
    (how many queued messages are parked), `paused_at_us` (with `paused_by`
    and `paused_reason`; null when not paused).
    """
    flight = state.in_flight
    paused = state.paused
    return {
        "incarnation": state.incarnation,
        "next_seq": state.next_seq,
        "wake_at_us": state.wake_at_us,
        "blocked_reason": state.blocked_reason,
        "head_since_us": state.head_since_us,
        "parked": sum(1 for m in state.pending if m.parked),
        "paused_at_us": None if paused is None else paused.at_us,
        "paused_by": None if paused is None else paused.actor,
        "paused_reason": None if paused is None else paused.reason,
        "in_flight": None if flight is None else {
            "message": message_to_doc(flight.message),
            "attempt": flight.attempt,
            "started_at_us": flight.started_at_us,
            "phase": str(flight.phase),
            "due_at_us": flight.due_at_us,
            "deadline_us": flight.deadline_us,
            "idempotency_key": flight.idempotency_key,
            "acked_early": flight.acked_early,
            "skipped": flight.skipped,
            "pmid": flight.provider_message_id,
            "returned_at_us": flight.returned_at_us,
            "early_mids": list(flight.early_mids),
            "early_mids_status": flight.early_mids_status,
        },
        # Indexed: a receipt that names only the recipient finds its rooms by it.
        "in_flight_to": None if flight is None else recipient_key(flight.message.provider, flight.message.recipient),
        "pending": [message_to_doc(m) for m in state.pending],
        "ended": [f"{e.seq} {e.outcome} {e.message_id}" + (f" {e.attempts}" if e.attempts else "")
                  for e in state.ended],
        "awaiting": [{"id": mid, "pub_us": pub} for mid, pub in state.awaiting],
        "counts": dict(state.counts),
        "pace": None if state.pace_tokens is None else {"tokens": state.pace_tokens, "at_us": state.pace_at_us},
        "next_sequence": state.next_sequence,
        "held": [message_to_doc(m) for m in state.held],
        "gap_due_us": state.gap_due_us,
        "accepted": {},  # every transaction folds and clears the blind-written acceptances
    }


def recipient_key(provider: str, recipient: str) -> str:
    """The room document's `in_flight_to`: `{provider}:{recipient}`."""
    return f"{provider}:{recipient}"


def ack_deadline_us(policy: Policy, returned_at_us: int) -> int:
    """The end of a sent message's ack wait: `ACK_TIMEOUT_MS` after its send returned."""
    return returned_at_us + policy.ack_timeout_ms * 1000


def acceptance_key(incarnation: int, seq: int, attempt: int) -> str:
    """The key of an attempt in the room document's `accepted` map (a plain
    Firestore field name: letters, digits, `_`)."""
    return f"a{_b36(incarnation)}_{seq}_{attempt}"


def room_from_doc(room_id: str, d: dict[str, Any] | None) -> RoomState:
    """Inverse of `room_to_doc`; a missing document is a new, empty room.

    The `accepted` map holds send acceptances written blind (no read, no
    transaction: `RoomStore.record_accepted`), `{acceptance_key: deadline_us}`.
    An entry for the in-flight attempt while it is SENDING is the same as the
    rule for `SendReturned(ACCEPTED)`: the attempt is SENT with that deadline.
    Entries of other attempts are stale and dropped at the next write.
    """
    if not d:
        return RoomState(room_id)
    state = _room_from_fields(room_id, d)
    flight = state.in_flight
    if flight is not None and flight.phase is Phase.SENDING:
        deadline = (d.get("accepted") or {}).get(acceptance_key(state.incarnation, flight.message.seq,
                                                                flight.attempt))
        if deadline is not None:
            state = replace(state, in_flight=replace(flight, phase=Phase.SENT, deadline_us=deadline))
    return state


def _room_from_fields(room_id: str, d: dict[str, Any]) -> RoomState:
    f = d.get("in_flight")
    ended = []
    for line in d.get("ended", []):
        seq, outcome, mid, *attempts = line.split(" ")
        ended.append(Ended(int(seq), mid, outcome, int(attempts[0]) if attempts else 0))
    return RoomState(
        room_id=room_id,
        incarnation=d["incarnation"],
        next_seq=d["next_seq"],
        in_flight=None if f is None else InFlight(
            message=message_from_doc(f["message"]),
            attempt=f["attempt"],
            started_at_us=f["started_at_us"],
            phase=Phase(f["phase"]),
            due_at_us=f["due_at_us"],
            idempotency_key=f["idempotency_key"],
            deadline_us=f.get("deadline_us"),
            acked_early=f.get("acked_early"),
            skipped=bool(f.get("skipped")),
            provider_message_id=f.get("pmid"),
            returned_at_us=f.get("returned_at_us"),
            early_mids=tuple(f.get("early_mids") or ()),
            early_mids_status=f.get("early_mids_status"),
        ),
        pending=tuple(message_from_doc(m) for m in d.get("pending", [])),
        ended=tuple(ended),
        awaiting=tuple((a["id"], a["pub_us"]) for a in d.get("awaiting", [])),
        counts=dict(d.get("counts", {})),
        pace_tokens=None if not d.get("pace") else float(d["pace"]["tokens"]),
        pace_at_us=0 if not d.get("pace") else int(d["pace"]["at_us"]),
        next_sequence=d.get("next_sequence", 1),
        held=tuple(message_from_doc(m) for m in d.get("held", [])),
        gap_due_us=d.get("gap_due_us"),
        paused=None if d.get("paused_at_us") is None else Paused(d.get("paused_by") or "", d.get("paused_reason") or "",
                                                                 d["paused_at_us"]),
    )


# Room documents also carry `expire_at` (a timestamp or null), set by the store.
_EXPIRE_AT_BYTES = docsize.string_size("expire_at") + 8


def room_doc_bytes(state: RoomState) -> int:
    """Firestore storage size of the room's document, in bytes (shared/docsize.py)."""
    return docsize.document_size(f"{ROOMS}/{state.room_id}", room_to_doc(state)) + _EXPIRE_AT_BYTES


# ---------------------------------------------------------------- pacing


def bucket_now(tokens: float | None, at_us: int, now_us: int, interval_ms: int, burst: int) -> float:
    """Tokens of a pair-rate bucket at `now_us`: `tokens` at `at_us` (None:
    full) plus one per `interval_ms` since, at most `burst`."""
    if tokens is None:
        return float(burst)
    return min(float(burst), tokens + max(0, now_us - at_us) / (interval_ms * 1000))


def token_ready_at_us(tokens: float, now_us: int, interval_ms: int) -> int:
    """The first moment (epoch us) the bucket holds a whole token, given
    `tokens` at `now_us` (now if it already does)."""
    if tokens >= 1.0:
        return now_us
    return now_us + math.ceil((1.0 - tokens) * interval_ms * 1000)


# ---------------------------------------------------------------- decide


def decide(state: RoomState, event: RoomEvent, policy: Policy, component: str) -> Decision:
    """Apply one event to one room.

    Args:
        state: the room as stored (a fresh `RoomState(room_id)` for a new room).
        event: what happened.
        policy: timeouts (ms) and limits.
        component: the function handling the event, for the log.

    Returns:
        A `Decision`. Never raises on a stale, duplicate or late event: those
        yield no state change and an `*_ignored` log event.
    """
    t = Transition(state, policy, component, event.at_us)
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"unknown room event {event!r}")
    return handler(t, event)


class Transition:
    """One `decide` call being applied: the room before it, and the effects
    and log events it accumulates."""

    def __init__(self, state: RoomState, policy: Policy, component: str, now_us: int) -> None:
        self.state = state
        self.policy = policy
        self.component = component
        self.now_us = now_us
        self.effects: list[Effect] = []
        self.events: list[DeliveryEvent] = []
        self.dead_letters: list[KeepDeadLetter] = []

    # -- helpers

    def log(self, event: EventType, msg: QueuedMessage | None = None, **fields: object) -> None:
        if msg is not None:
            fields.setdefault("seq", msg.seq)
            fields.setdefault("message_id", msg.message_id)
            fields.setdefault("provider", msg.provider)
        self.events.append(DeliveryEvent(event=event, ts=utc_iso(self.now_us), component=self.component,
                                         room_id=self.state.room_id, **fields))  # type: ignore[arg-type]

    def done(self, state: RoomState | None, refused: str | None = None) -> Decision:
        if state is not None:
            state = self.request_preparations(state)
        asked: set[tuple[int, int]] = set()
        effects = []
        for effect in self.effects:  # one request per preparation attempt, however many rules asked
            if isinstance(effect, Prepare):
                if (effect.seq, effect.attempt) in asked:
                    continue
                asked.add((effect.seq, effect.attempt))
            effects.append(effect)
        return Decision(state, tuple(effects), tuple(self.events), refused, tuple(self.dead_letters))

    def preparation_window(self, state: RoomState) -> list[QueuedMessage]:
        """The messages whose preparation may run now: the head of line (in
        flight, or the first queued) and the `prepare_ahead` queued behind it."""
        if state.in_flight is not None:
            return [state.in_flight.message, *state.pending[:self.policy.prepare_ahead]]
        return list(state.pending[:self.policy.prepare_ahead + 1])

    def request_preparations(self, state: RoomState) -> RoomState:
        """Ask once for the preparation of every message of the window that
        needs one and was not asked for since its (re)entry, as its next
        preparation attempt (a number never used for it, so a task name never
        used before). Placeholders and parked messages wait (a redrive
        releases them)."""
        fresh = {m.seq: m.prep_attempt + 1 for m in self.preparation_window(state)
                 if m.needs_preparation and not m.preparation_asked and m.text is not None and not m.parked
                 and m.prep_failed is None}
        if not fresh:
            return state
        for seq, attempt in sorted(fresh.items()):
            self.effects.append(Prepare(state.room_id, state.incarnation, seq, attempt, self.now_us))

        def asked(m: QueuedMessage) -> QueuedMessage:
            return replace(m, prep_attempt=fresh[m.seq]) if m.seq in fresh else m

        flight = state.in_flight
        if flight is not None and flight.message.seq in fresh:
            flight = replace(flight, message=asked(flight.message))
        return replace(state, in_flight=flight, pending=tuple(asked(m) for m in state.pending))

    def ignore(self, event: EventType, reason: IgnoreReason, **fields: object) -> Decision:
        """Log an event that changes nothing, keeping the current state."""
        self.log(event, reason=str(reason), **fields)
        return self.done(None)

    def arm(self, state: RoomState, flight: InFlight) -> RoomState:
        self.effects.append(ScheduleTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                          flight.due_at_us))
        return replace(state, in_flight=flight)

    def start(self, state: RoomState, msg: QueuedMessage, attempt: int, trigger: Trigger, cause: str) -> RoomState:
        """Give `msg` the baton as `attempt`: arm its first timer, then send it;
        or, when the room's pair-rate bucket has no token, wait for one
        (PACED, a timer due when it comes) without sending."""
        interval_ms, burst = self.policy.pace(msg.provider)
        if interval_ms:
            tokens = bucket_now(state.pace_tokens, state.pace_at_us, self.now_us, interval_ms, burst)
            if tokens < 1.0:
                ready = token_ready_at_us(tokens, self.now_us, interval_ms)
                self.log(EventType.PACED, msg, attempt=attempt,
                         reason=f"pair rate: next token in {(ready - self.now_us) / 1000:.0f} ms")
                state = replace(state, pace_tokens=tokens, pace_at_us=self.now_us)
                return self.arm(state, InFlight(msg, attempt, self.now_us, Phase.PACED, ready, cause))
            state = replace(state, pace_tokens=tokens - 1.0, pace_at_us=self.now_us)
        due = self.now_us + (self.policy.ack_timeout_ms + self.policy.first_timer_slack_ms) * 1000
        flight = InFlight(msg, attempt, self.now_us, Phase.SENDING, due, cause)
        state = self.arm(state, flight)
        self.effects.append(Send(
            state.room_id, state.incarnation, msg, attempt,
            make_delivery_id(state.room_id, state.incarnation, msg.seq, attempt, self.now_us),
            trigger, self.now_us, self.now_us + self.policy.send_start_deadline_ms * 1000, cause))
        return state

    def advance(self, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
        """With nothing in flight, start the head of the queue unless it is parked."""
        assert state.in_flight is None
        if not state.pending or state.paused is not None:
            return state  # paused: the pause was logged; nothing starts until the resume
        while state.pending and state.pending[0].prep_failed is not None and not state.pending[0].parked:
            state = self.poison(state, state.pending[0])
        if not state.pending:
            return state
        head = state.pending[0]
        if head.parked:
            self.log(EventType.BLOCKED, head, reason=head.parked)
            return state
        state = replace(state, pending=state.pending[1:])
        if head.needs_preparation:
            return self.wait_for_preparation(state, head, cause)
        return self.start(state, head, head.next_attempt, trigger, cause)

    def wait_for_preparation(self, state: RoomState, msg: QueuedMessage, cause: str) -> RoomState:
        """The head of line holds the baton unsent until its preparation's
        result comes (PREPARING), with a timer at PREPARE_TIMEOUT_MS that asks
        for it again should the result never come."""
        self.log(EventType.PREPARING, msg,
                 reason=f"preparation attempt {max(msg.prep_floor + 1, msg.prep_attempt)} under way")
        due = self.now_us + self.policy.prepare_timeout_ms * 1000
        return self.arm(state, InFlight(msg, msg.next_attempt, self.now_us, Phase.PREPARING, due, cause))

    def poison(self, state: RoomState, msg: QueuedMessage) -> RoomState:
        """The queued head whose preparation was given up ends by PREPARE_POISON
        (`dead_letter`; `park` parks it at once when the preparation is given up)."""
        assert state.pending and state.pending[0] is msg
        if self.policy.prepare_poison == "park":
            parked = replace(msg, parked=f"{PREPARE_PARK_REASON}: {msg.prep_failed}")
            self.log(EventType.PARKED, parked, reason=parked.parked)
            return replace(state, pending=(parked, *state.pending[1:]))
        reason = f"{PREPARE_PARK_REASON}: {msg.prep_failed}"
        self.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation, msg, 0, reason))
        self.log(EventType.DEAD_LETTERED, msg, reason=reason)
        return replace(self.record_end(state, msg, EventType.DEAD_LETTERED, msg.attempts), pending=state.pending[1:])

    def record_end(self, state: RoomState, msg: QueuedMessage, outcome: EventType, attempts: int = 0) -> RoomState:
        """Count the end and remember it (de-duplication, late statuses); a
        dead letter also keeps the attempt numbers it took (`attempts`)."""
        counts = dict(state.counts)
        counts[str(outcome)] = counts.get(str(outcome), 0) + 1
        kept = attempts if outcome == EventType.DEAD_LETTERED else 0
        ended = (*state.ended, Ended(msg.seq, msg.message_id, str(outcome), kept))[-self.policy.dedup_retention:]
        return replace(state, counts=counts, ended=ended)

    def cancel_pending_timer(self, state: RoomState, flight: InFlight) -> None:
        """An attempt ending before its wake-up leaves a timer task that can
        only be ignored: ask for it to be deleted (after the next send)."""
        if flight.due_at_us > self.now_us:
            self.effects.append(CancelTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                            flight.due_at_us))

    def end(self, state: RoomState, outcome: EventType, trigger: Trigger, cause: str, **fields: object) -> RoomState:
        """End the in-flight message as `outcome` and pass the baton to the head
        of the queue, if any (same transaction: no lost wake-up)."""
        flight = state.in_flight
        assert flight is not None
        self.log(outcome, flight.message, attempt=flight.attempt, **fields)
        self.cancel_pending_timer(state, flight)
        state = replace(self.record_end(state, flight.message, outcome, flight.attempt), in_flight=None)
        return self.advance(state, trigger, cause)

    def release(self, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
        """Pass the baton of an in-flight message that has already ended
        (skipped while its send could still go out) to the head of the queue."""
        assert state.in_flight is not None
        self.cancel_pending_timer(state, state.in_flight)
        return self.advance(replace(state, in_flight=None), trigger, cause)

    def give_up(self, state: RoomState, reason: str, cause: str) -> RoomState:
        flight = state.in_flight
        assert flight is not None
        self.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation,
                                                replace(flight.message, attempts=flight.attempt), flight.attempt,
                                                reason))
        return self.end(state, EventType.DEAD_LETTERED, Trigger.DEAD_LETTERED, cause, reason=reason)

    def resend(self, state: RoomState, trigger: Trigger, reason: str, cause: str) -> RoomState:
        """Send the in-flight message again as the next attempt, or dead-letter
        it once `max_send_attempts` is used up."""
        flight = state.in_flight
        assert flight is not None
        tries = self.tries(flight)
        if tries >= self.policy.max_send_attempts:
            return self.give_up(state, f"no confirmed send after {tries} attempts; last: {reason}", cause)
        self.log(EventType.RESENT, flight.message, attempt=flight.attempt + 1, trigger=str(trigger), reason=reason)
        return self.start(state, flight.message, flight.attempt + 1, trigger, cause)

    @staticmethod
    def tries(flight: InFlight) -> int:
        """Sends of the in-flight message since its (re)entry: what
        MAX_SEND_ATTEMPTS bounds (a redrive starts a new count, never a new
        attempt number)."""
        return flight.attempt - flight.message.attempt_floor

    def current(self, incarnation: int, seq: int, attempt: int | None = None) -> InFlight | None:
        """The in-flight attempt if it is (incarnation, seq[, attempt]), else None."""
        flight = self.state.in_flight
        if flight is None or incarnation != self.state.incarnation or flight.message.seq != seq:
            return None
        if attempt is not None and flight.attempt != attempt:
            return None
        return flight

    def rearm_if_replay(self, key: str) -> None:
        """A redelivered request that started the in-flight attempt re-arms its
        timer and asks again for the preparations of the window it slid (same
        task names, so idempotent on the real service): its first delivery
        may have died after the commit and before they were made."""
        flight = self.state.in_flight
        if flight is not None and flight.idempotency_key == key:
            self.effects.append(ScheduleTimer(self.state.room_id, self.state.incarnation, flight.message.seq,
                                              flight.attempt, flight.due_at_us))
            # The same request slid the preparation window: the prepare tasks it
            # asked for may not have been made either (same names: idempotent).
            for m in self.preparation_window(self.state):
                if m.needs_preparation and m.preparation_asked and m.prep_failed is None and not m.parked:
                    self.effects.append(Prepare(self.state.room_id, self.state.incarnation, m.seq, m.prep_attempt,
                                                self.now_us))

    def ask_again_if_replay(self, message_id: str) -> None:
        """A redelivered push of a message whose preparation is asked for and
        not done asks for it again (same task name, so idempotent on the real
        service): its first delivery may have died before the task was made."""
        window = self.preparation_window(self.state)
        for m in window:
            if m.message_id == message_id and m.needs_preparation and m.preparation_asked and m.prep_failed is None:
                self.effects.append(Prepare(self.state.room_id, self.state.incarnation, m.seq, m.prep_attempt,
                                            self.now_us))

    def wait_until(self, state: RoomState, flight: InFlight, wake_us: int, **changes: Any) -> RoomState:
        """Keep waiting: the attempt's wake-up moves to `wake_us` (a new timer)."""
        flight = replace(flight, due_at_us=wake_us, **changes)
        if wake_us > self.now_us:
            self.log(EventType.TIMER_REARMED, flight.message, attempt=flight.attempt, reason=str(flight.phase))
        return self.arm(state, flight)

    def with_incarnation(self) -> RoomState:
        """The state, with an incarnation if this event creates the document."""
        if self.state.incarnation:
            return self.state
        return replace(self.state, incarnation=self.now_us)

    # -- events

    def enqueue(self, ev: Enqueue) -> Decision:
        state = self.state
        for i, m in enumerate(state.pending):
            if m.message_id == ev.message_id and m.text is None:
                return self.done(self.fill_placeholder(state, i, ev))
        if ev.message_id in state.held_ids() or any(e.message_id == ev.message_id for e in state.ended):
            self.rearm_if_replay(ev.idempotency_key)
            self.ask_again_if_replay(ev.message_id)
            return self.ignore(EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                               message_id=ev.message_id, provider=ev.provider)
        state = self.with_incarnation()
        awaited = [a for a in state.awaiting if a[0] != ev.message_id]
        if len(awaited) < len(state.awaiting):
            state = replace(state, awaiting=tuple(awaited))  # it got in after all
        # A later message of the room arrived: Pub/Sub, which delivers one
        # message of an ordering key at a time, has given up on the awaited
        # ones. Each gets its place now, ahead of this message.
        state = replace(self.hold_places(state, tuple(awaited), ev.provider, ev.recipient), awaiting=())
        msg = QueuedMessage(state.next_seq, ev.message_id, ev.provider, ev.recipient, ev.text,
                            ev.published_at_us, self.now_us, media_kind=ev.media_kind, media_link=ev.media_link,
                            prepare=ev.prepare, sequence=ev.sequence)
        # Placeholders are not counted: they are tiny and never refused.
        held = sum(m.text is not None for m in state.pending) + (state.in_flight is not None) + len(state.held)
        ahead = ev.sequence is not None and ev.sequence > state.next_sequence
        if ahead:
            # Its producer's earlier messages have not come yet: it waits outside the queue.
            msg = replace(msg, seq=0)
            candidate = replace(state, held=tuple(sorted((*state.held, msg), key=lambda m: m.sequence or 0)))
        else:
            candidate = replace(state, next_seq=state.next_seq + 1, pending=(*state.pending, msg))
        full = None
        if held >= self.policy.max_queued_messages:
            full = f"room holds {held} messages (MAX_QUEUED_MESSAGES={self.policy.max_queued_messages})"
        elif room_doc_bytes(candidate) > self.policy.max_room_bytes:
            full = f"room document would exceed MAX_ROOM_BYTES={self.policy.max_room_bytes}"
        if full is not None:
            return self.refuse(state, ev, full)
        if ahead:
            self.log(EventType.SEQUENCE_HELD, msg,
                     reason=f"producer sequence {ev.sequence} waits for {state.next_sequence}"
                            f"{'' if ev.sequence == state.next_sequence + 1 else f'..{ev.sequence - 1}'}")
            if candidate.gap_due_us is None:
                candidate = self.start_gap_timer(candidate)
            return self.done(candidate)
        late = ev.sequence is not None and ev.sequence < state.next_sequence
        self.log(EventType.ENQUEUED, msg, published_at=utc_iso(ev.published_at_us),
                 reason=f"producer sequence {ev.sequence} came after its gap was given up" if late else None)
        if ev.sequence == state.next_sequence:
            candidate = self.admit_held(replace(candidate, next_sequence=state.next_sequence + 1))
        if candidate.in_flight is None and candidate.pending and candidate.pending[0] is msg:
            candidate = self.advance(candidate, Trigger.ENQUEUE, ev.idempotency_key)
        return self.done(candidate)

    def fill_placeholder(self, state: RoomState, i: int, ev: Enqueue) -> RoomState:
        """The push of placeholder `state.pending[i]` came after all. Its place
        was kept and nothing after it was sent, so it goes in its turn; unless
        its producer `sequence` is ahead of the room's: then it leaves the
        place (logged `sequence_held` under the placeholder's seq) and waits
        outside the queue like any message whose predecessors have not come."""
        m = state.pending[i]
        rest = (*state.pending[:i], *state.pending[i + 1:])
        if ev.sequence is not None and ev.sequence > state.next_sequence:
            self.log(EventType.SEQUENCE_HELD, m,
                     reason=f"producer sequence {ev.sequence} waits for {state.next_sequence}: "
                            f"its placeholder's place (seq {m.seq}) is given up")
            waiting = replace(m, **ev.content, parked=None, seq=0)
            state = replace(state, pending=rest,
                            held=tuple(sorted((*state.held, waiting), key=lambda h: h.sequence or 0)))
            if state.gap_due_us is None:
                state = self.start_gap_timer(state)
        else:
            filled = replace(m, **ev.content, parked=None)
            self.log(EventType.ENQUEUED, filled, published_at=utc_iso(ev.published_at_us))
            state = replace(state, pending=(*state.pending[:i], filled, *state.pending[i + 1:]))
            if ev.sequence is not None and ev.sequence == state.next_sequence:
                state = self.admit_held(replace(state, next_sequence=state.next_sequence + 1))
        if state.in_flight is None and i == 0:
            state = self.advance(state, Trigger.ENQUEUE, ev.idempotency_key)
        return state

    def start_gap_timer(self, state: RoomState) -> RoomState:
        """Wait at most SEQUENCE_GAP_TIMEOUT_MS for the missing producer
        sequence numbers: a timer task (seq 0, attempt 0) due then."""
        due = self.now_us + self.policy.sequence_gap_timeout_ms * 1000
        self.effects.append(ScheduleTimer(state.room_id, state.incarnation, 0, 0, due))
        return replace(state, gap_due_us=due)

    def admit_held(self, state: RoomState) -> RoomState:
        """Held messages whose turn has come (their `sequence` is the next
        expected, or below it) enter the queue in sequence order, with seqs.
        If some still wait, a new gap starts now (its own timer)."""
        admitted = 0
        while state.held and (state.held[0].sequence or 0) <= state.next_sequence:
            admitted += 1
            m = state.held[0]
            entered = replace(m, seq=state.next_seq, enqueued_at_us=self.now_us)
            self.log(EventType.ENQUEUED, entered, published_at=utc_iso(m.published_at_us))
            state = replace(state, held=state.held[1:], next_seq=state.next_seq + 1,
                            next_sequence=max(state.next_sequence, (m.sequence or 0) + 1),
                            pending=(*state.pending, entered))
        if not state.held:
            return replace(state, gap_due_us=None)
        # The gap waited on is filled and another remains: it is timed from now.
        return self.start_gap_timer(state) if admitted or state.gap_due_us is None else state

    def gap_timer(self, ev: TimerFired) -> Decision:
        """The gap timer: past SEQUENCE_GAP_TIMEOUT_MS, the missing producer
        sequence numbers are given up (logged), the held messages enter the
        queue, and the room moves on."""
        state = self.state
        if ev.incarnation != state.incarnation or state.gap_due_us is None or not state.held \
                or ev.due_at_us < state.gap_due_us:
            return self.ignore(EventType.TIMEOUT_IGNORED, IgnoreReason.SUPERSEDED_TIMER, seq=0)
        if self.now_us < state.gap_due_us:
            self.effects.append(ScheduleTimer(state.room_id, state.incarnation, 0, 0, state.gap_due_us))
            return self.done(state)
        return self.done(self.give_up_gap(state, ev.idempotency_key))

    def give_up_gap(self, state: RoomState, cause: str) -> RoomState:
        first = state.held[0].sequence or 0
        missing = f"{state.next_sequence}" + ("" if first == state.next_sequence + 1 else f"..{first - 1}")
        self.log(EventType.SEQUENCE_GAP, None, reason=f"producer sequence {missing} missing after "
                                                      f"{self.policy.sequence_gap_timeout_ms} ms: given up")
        state = self.admit_held(replace(state, next_sequence=first, gap_due_us=None))
        if state.in_flight is None:
            state = self.advance(state, Trigger.ENQUEUE, cause)
        return state

    def refuse(self, state: RoomState, ev: Enqueue, reason: str) -> Decision:
        """Push back on a full room, remembering the message's place (written
        once: a redelivery of the same refused push writes nothing)."""
        self.log(EventType.BACKPRESSURE, None, message_id=ev.message_id, provider=ev.provider, reason=reason)
        marked = replace(state, awaiting=(*state.awaiting, (ev.message_id, ev.published_at_us)))
        return self.done(None if marked == self.state else marked, refused=reason)

    def hold_places(self, state: RoomState, awaited: tuple[tuple[str, int], ...], provider: str,
                    recipient: str) -> RoomState:
        """Placeholders, in order, for awaited pushes that Pub/Sub has given up
        on: each keeps its message's place until its dead-letter copy fills it."""
        for mid, pub in awaited:
            state = self.place(state, QueuedMessage(
                state.next_seq, mid, provider, recipient, None, pub, self.now_us,
                parked="refused while the room was full and dead-lettered by Pub/Sub; "
                       "its copy from the dead-letter topic fills this place"))
        return state

    def place(self, state: RoomState, msg: QueuedMessage) -> RoomState:
        """Append a parked message (or placeholder) to the queue with the next seq."""
        self.log(EventType.PARKED, msg, reason=msg.parked)
        return replace(state, next_seq=state.next_seq + 1, pending=(*state.pending, msg))

    def park(self, ev: Park) -> Decision:
        state = self.state
        for i, m in enumerate(state.pending):
            if m.message_id == ev.message_id:
                if m.text is not None:
                    return self.ignore(EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                                       message_id=ev.message_id, provider=ev.provider)
                filled = replace(m, **ev.content, parked=ev.reason)
                self.log(EventType.PARKED, filled, reason=ev.reason)
                return self.done(replace(state, pending=(*state.pending[:i], filled, *state.pending[i + 1:])))
        if ev.message_id in state.held_ids() or any(e.message_id == ev.message_id for e in state.ended):
            # Pub/Sub dead-letters best-effort, sometimes more than once, and a
            # push may have got in on a late retry.
            return self.ignore(EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                               message_id=ev.message_id, provider=ev.provider)
        state = self.with_incarnation()
        reason = ev.reason
        if not any(mid == ev.message_id for mid, _ in state.awaiting) and state.next_seq > 1:
            # Refused without a marker (Firestore unreachable or contended for
            # the whole retry budget): messages published after it may already
            # have been sent. It is parked at the tail; the reason says so.
            reason += "; it was never seen by its room, so later messages may have been sent before it"
        # Pushes awaited before this one came earlier in the room's order
        # (Pub/Sub delivers a key's messages one at a time): their places come
        # first. Those awaited after it stay awaited.
        ids = [mid for mid, _ in state.awaiting]
        cut = ids.index(ev.message_id) if ev.message_id in ids else len(ids)
        before, after = state.awaiting[:cut], state.awaiting[cut + 1:]
        was_empty = state.in_flight is None and not state.pending
        state = replace(self.hold_places(state, before, ev.provider, ev.recipient), awaiting=after)
        state = self.place(state, QueuedMessage(state.next_seq, ev.message_id, ev.provider, ev.recipient,
                                                ev.text, ev.published_at_us, self.now_us, parked=reason,
                                                media_kind=ev.media_kind, media_link=ev.media_link,
                                                prepare=ev.prepare, sequence=ev.sequence))
        if was_empty:
            state = self.advance(state, Trigger.ENQUEUE, ev.idempotency_key)  # logs `blocked`
        return self.done(state)

    def send_returned(self, ev: SendReturned) -> Decision:
        flight = self.current(ev.incarnation, ev.seq, ev.attempt)
        if flight is None or flight.phase is not Phase.SENDING:
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.STALE_SEND_OUTCOME, seq=ev.seq,
                               attempt=ev.attempt, status=str(ev.outcome))
        state = self.state
        if flight.skipped:
            # Skipped while this call was under way; it is over now.
            return self.done(self.release(state, Trigger.SKIPPED, ev.cause))
        if flight.acked_early is not None:
            # An earlier attempt was acked meanwhile; this call is over now.
            return self.done(self.end(state, EventType.ACKED, Trigger.ACK, ev.cause, status=flight.acked_early))
        if ev.outcome is SendOutcome.ACCEPTED:
            level = self.policy.ack_level(flight.message.provider)
            if level == "accepted":
                return self.done(self.end(state, EventType.ACKED, Trigger.ACK, ev.cause, status="accepted",
                                          provider_message_id=ev.provider_message_id,
                                          send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
            if ev.provider_message_id is not None and ev.provider_message_id in flight.early_mids \
                    and flight.early_mids_status is not None and acks(level, flight.early_mids_status):
                # A receipt named this message before its send call returned.
                return self.done(self.end(state, EventType.ACKED, Trigger.ACK, ev.cause,
                                          status=flight.early_mids_status, provider_message_id=ev.provider_message_id,
                                          send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
            # The message is held ack_timeout from now. The timer armed at the
            # start stays; if it comes earlier it arms another for the rest.
            deadline = ack_deadline_us(self.policy, ev.at_us)
            flight = replace(flight, phase=Phase.SENT, deadline_us=deadline)
            if ev.provider_message_id is not None:
                # Recorded by a transaction (not the blind-written acceptance):
                # what a receipt by recipient is matched against.
                flight = replace(flight, provider_message_id=ev.provider_message_id, returned_at_us=ev.at_us,
                                 early_mids=(), early_mids_status=None)
            return self.done(replace(state, in_flight=flight))
        if ev.outcome is SendOutcome.UNKNOWN:
            # Possibly sent (the service logged `send_unknown`): held like a
            # sent message, then resent if no ack came.
            deadline = ack_deadline_us(self.policy, ev.at_us)
            return self.done(replace(state, in_flight=replace(flight, phase=Phase.UNKNOWN, deadline_us=deadline)))
        if ev.permanent:
            return self.done(self.end(state, EventType.FAILED, Trigger.FAILED, ev.cause, error_code=ev.error_code,
                                      error_title=ev.error_title, reason="send_refused"))
        tries = self.tries(flight)
        if tries >= self.policy.max_send_attempts:
            reason = f"send refused {tries} times; last error {ev.error_code}: {ev.error_title}"
            return self.done(self.give_up(state, reason, ev.cause))
        if ev.rate_limited:
            delay_ms = 4 ** tries * 1000
        else:
            delay_ms = self.policy.send_retry_base_ms * 4 ** (tries - 1)
        retry_at = ev.at_us + delay_ms * 1000
        return self.done(self.arm(state, replace(flight, phase=Phase.BACKOFF, deadline_us=retry_at,
                                                 due_at_us=retry_at)))

    def status(self, ev: StatusUpdate) -> Decision:
        ids = {"attempt": ev.attempt, "status": ev.status, "provider_message_id": ev.provider_message_id}
        if ev.status == "sent":
            # The platform accepted the message; only delivered/read ack it.
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.SENT_STATUS, seq=ev.seq, **ids)
        if self.state.incarnation and ev.incarnation != self.state.incarnation:
            return self.ignore(EventType.STATUS_UNKNOWN, IgnoreReason.STALE_INCARNATION, seq=ev.seq, **ids)
        if not self.state.incarnation or ev.seq >= self.state.next_seq:
            return self.ignore(EventType.STATUS_UNKNOWN, IgnoreReason.UNKNOWN_DELIVERY, seq=ev.seq, **ids)
        flight = self.current(ev.incarnation, ev.seq)
        if flight is not None and flight.skipped:
            # Ended as skipped; only the baton waits for the send window.
            self.log(EventType.STATUS_IGNORED, None, seq=ev.seq, reason=f"after_{EventType.SKIPPED}", **ids)
            return self.done(None)
        if flight is None:
            self.rearm_if_replay(ev.idempotency_key)
            outcome = self.state.outcome_of(ev.seq)
            late = ev.status in ACK_STATUSES and outcome == EventType.TIMED_OUT
            if late:
                reason: IgnoreReason | str = IgnoreReason.LATE_ACK
            elif outcome is None:
                reason = IgnoreReason.NOT_IN_FLIGHT
            else:
                reason = f"after_{outcome}"
            self.log(EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(reason),
                     send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000 if late else None, **ids)
            return self.done(None)
        if ev.status in ACK_STATUSES and not acks(self.policy.ack_level(flight.message.provider), ev.status):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, seq=ev.seq, **ids)
        if ev.status in ACK_STATUSES and ev.attempt < flight.attempt and flight.phase is Phase.SENDING:
            # An earlier attempt reached the device while this one is being
            # sent: the message is acked, but the baton waits until this
            # attempt's call cannot go out any more.
            if flight.acked_early is not None:
                return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.ACKED_WHILE_RESENDING, seq=ev.seq, **ids)
            self.log(EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(IgnoreReason.ACKED_WHILE_RESENDING),
                     **ids)
            window_end = flight.started_at_us + self.policy.send_window_ms * 1000
            return self.done(self.arm(self.state, replace(flight, acked_early=ev.status, due_at_us=window_end)))
        if ev.status in ACK_STATUSES:
            # Any attempt of this seq reaching the device acks the message.
            return self.done(self.end(self.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key,
                                      status=ev.status, provider_message_id=ev.provider_message_id,
                                      send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000))
        if ev.status == "failed":
            if ev.attempt != flight.attempt:
                return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.FAILED_FOR_OLDER_ATTEMPT, seq=ev.seq, **ids)
            return self.done(self.end(self.state, EventType.FAILED, Trigger.FAILED, ev.idempotency_key,
                                      status=ev.status, provider_message_id=ev.provider_message_id,
                                      error_code=ev.error_code, error_title=ev.error_title))
        return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.UNKNOWN_STATUS, seq=ev.seq, **ids)

    def receipt(self, ev: RecipientReceipt) -> Decision:
        """A receipt by recipient (Messenger watermark, Instagram seen): acks
        the in-flight message only if it provably covers it: one of `mids` is
        the attempt's own id, or the watermark is at least
        `watermark_margin_ms` past the return of its accepted send call. A
        receipt before the call returned is remembered by its mids only (a
        watermark then cannot tell our message from the ones before it)."""
        flight = self.state.in_flight
        fields = {"status": ev.status}
        if flight is None or flight.skipped or flight.acked_early is not None:
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.NOT_IN_FLIGHT, provider=ev.provider, **fields)
        msg = flight.message
        if (msg.provider, msg.recipient) != (ev.provider, ev.recipient):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        if not acks(self.policy.ack_level(msg.provider), ev.status):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        if flight.phase is Phase.SENDING:
            if not ev.mids:
                return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING,
                                   provider=ev.provider, seq=msg.seq, attempt=flight.attempt, **fields)
            early = tuple(dict.fromkeys((*flight.early_mids, *ev.mids)))[-20:]
            self.log(EventType.STATUS_IGNORED, msg, attempt=flight.attempt,
                     reason="receipt_before_send_returned", **fields)
            return self.done(replace(self.state, in_flight=replace(flight, early_mids=early,
                                                                   early_mids_status=ev.status)))
        by_mid = flight.provider_message_id is not None and flight.provider_message_id in ev.mids
        by_watermark = (flight.phase is Phase.SENT and flight.returned_at_us is not None
                        and ev.watermark_us is not None
                        and ev.watermark_us >= flight.returned_at_us + self.policy.watermark_margin_ms * 1000)
        if not (by_mid or by_watermark):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        return self.done(self.end(self.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key, status=ev.status,
                                  provider_message_id=flight.provider_message_id,
                                  send_to_ack_ms=(ev.seen_at_us - flight.started_at_us) / 1000))

    def timer(self, ev: TimerFired) -> Decision:
        if ev.seq == 0:
            return self.gap_timer(ev)
        flight = self.current(ev.incarnation, ev.seq, ev.attempt)
        if flight is None:
            self.rearm_if_replay(ev.idempotency_key)
            return self.ignore(EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_IN_FLIGHT, seq=ev.seq, attempt=ev.attempt)
        if ev.due_at_us < flight.due_at_us:
            # An earlier timer of this attempt; the later one is armed.
            return self.ignore(EventType.TIMEOUT_IGNORED, IgnoreReason.SUPERSEDED_TIMER, seq=ev.seq,
                               attempt=ev.attempt)
        return self.done(self.wake(flight, ev.idempotency_key))

    def wake(self, flight: InFlight, cause: str) -> RoomState:
        """The in-flight attempt's wake-up came: act if its wait is over, else
        wait (a new timer) for the rest."""
        state = self.state
        if flight.phase is Phase.PREPARING:
            if self.now_us < flight.due_at_us:
                return self.wait_until(state, flight, flight.due_at_us)
            # No result within PREPARE_TIMEOUT_MS: the task was lost or is stuck.
            return self.preparation_failed(flight.message, None,
                                           f"no preparation result within {self.policy.prepare_timeout_ms} ms",
                                           False, cause)
        if flight.phase is Phase.PACED:
            if self.now_us < flight.due_at_us:
                return self.wait_until(state, flight, flight.due_at_us)
            if state.paused is not None:
                # Not sent yet: back to the head of the queue until the resume,
                # where it starts as this same attempt (its number was never sent).
                waiting = replace(flight.message, attempts=flight.attempt - 1)
                return replace(state, in_flight=None, pending=(waiting, *state.pending))
            return self.start(replace(state, in_flight=None), flight.message, flight.attempt, Trigger.PACED, cause)
        if flight.acked_early is not None or flight.skipped:
            window_end = flight.started_at_us + self.policy.send_window_ms * 1000
            if flight.phase is Phase.SENDING and self.now_us < window_end:
                return self.wait_until(state, flight, window_end)
            if flight.skipped:
                return self.release(state, Trigger.SKIPPED, cause)
            return self.end(state, EventType.ACKED, Trigger.ACK, cause, status=flight.acked_early)
        if flight.phase is Phase.SENDING:
            # No outcome recorded. A send of this attempt, if one was made,
            # returned by `started + send window`; hold the ack timeout after that.
            hold_until = flight.started_at_us + (self.policy.send_window_ms + self.policy.ack_timeout_ms) * 1000
            if self.now_us < hold_until:
                return self.wait_until(state, flight, hold_until)
            self.log(EventType.SEND_UNKNOWN, flight.message, attempt=flight.attempt,
                     reason="no send outcome was recorded (crash or lost write): counted as possibly sent")
            return self.resend(state, Trigger.RESEND, "send outcome never recorded", cause)
        assert flight.deadline_us is not None
        if self.now_us < flight.deadline_us:
            return self.wait_until(state, flight, flight.deadline_us)
        if flight.phase is Phase.SENT:
            return self.end(state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause)
        if flight.phase is Phase.UNKNOWN:
            return self.resend(state, Trigger.RESEND, "send outcome unknown and no ack by the deadline", cause)
        return self.resend(state, Trigger.RETRY, "retry after a refused send", cause)

    def sweep(self, ev: WatchdogSweep) -> Decision:
        flight = self.state.in_flight
        grace_us = self.policy.watchdog_grace_ms * 1000
        gap_due = self.state.gap_due_us
        if self.state.held and gap_due is not None and gap_due + grace_us <= self.now_us:
            self.log(EventType.WATCHDOG_RESCUED, None, reason="sequence gap")
            return self.done(self.give_up_gap(self.state, ev.idempotency_key))
        if flight is None or flight.due_at_us + grace_us > self.now_us:
            return self.ignore(EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_OVERDUE)
        self.log(EventType.WATCHDOG_RESCUED, flight.message, attempt=flight.attempt, reason=str(flight.phase))
        return self.done(self.wake(flight, ev.idempotency_key))

    def redrive(self, ev: Redrive) -> Decision:
        state = self.state
        fields = {"actor": ev.actor, "reason": ev.reason}
        for i, m in enumerate(state.pending):
            if m.seq == ev.seq and m.parked:
                if m.text is None:
                    return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.NO_BODY, seq=ev.seq, actor=ev.actor)
                # Prepared anew if need be, under preparation attempt numbers never used before.
                released = replace(m, parked=None, prep_floor=m.prep_attempt, prep_failed=None,
                                   attempt_floor=m.attempts)
                self.log(EventType.REDRIVEN, released, **fields)
                state = replace(state, pending=(*state.pending[:i], released, *state.pending[i + 1:]))
                if state.in_flight is None and i == 0:
                    state = self.advance(state, Trigger.REDRIVE, ev.idempotency_key)
                return self.done(state)
        if ev.message is None:
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.NOT_PARKED, seq=ev.seq, actor=ev.actor)
        return self.redrive_dead_letter(ev, ev.message)

    def redrive_dead_letter(self, ev: Redrive, kept: QueuedMessage) -> Decision:
        """A message baton dead-lettered goes back to the head of the queue:
        every queued message came after it. The room's own record of the
        message's last end is what makes a second redrive a no-op."""
        state = self.state
        ids = {"seq": ev.seq, "message_id": kept.message_id, "actor": ev.actor}
        if not state.incarnation or ev.incarnation != state.incarnation:
            # The room was deleted (TTL) and made anew: the message's seq and
            # its record are gone. Publishing it again is the way.
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.STALE_INCARNATION, **ids)
        if kept.message_id in state.held_ids():
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_HELD, **ids)
        last = next((e for e in reversed(state.ended) if e.message_id == kept.message_id), None)
        if last is None or last.outcome != EventType.DEAD_LETTERED:
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.NOT_DEAD_LETTERED, **ids)
        # Its attempt numbers go on above every one it took (fencing: a late
        # status of an old attempt can never be taken for the new one's); its
        # send count starts again. Prepared anew if it needs it (a media id may
        # have expired meanwhile), under preparation numbers never used before.
        attempts = max(kept.attempts, last.attempts)
        msg = replace(kept, seq=ev.seq, parked=None, enqueued_at_us=self.now_us, prepared=None,
                      prep_floor=kept.prep_attempt, prep_failed=None, attempts=attempts, attempt_floor=attempts)
        self.log(EventType.REDRIVEN, msg, actor=ev.actor, reason=ev.reason)
        # Ahead of every queued message that came after it (all of them, but
        # another dead letter of an earlier seq redriven before it).
        at = next((i for i, m in enumerate(state.pending) if m.seq > msg.seq), len(state.pending))
        state = replace(state, pending=(*state.pending[:at], msg, *state.pending[at:]))
        if state.in_flight is None and at == 0:
            state = self.advance(state, Trigger.REDRIVE, ev.idempotency_key)
        return self.done(state)

    def skip(self, ev: Skip) -> Decision:
        state = self.state
        fields = {"actor": ev.actor, "reason": ev.reason}
        flight = state.in_flight
        if flight is not None and flight.message.seq == ev.seq:
            if flight.skipped or flight.acked_early is not None:
                return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_ENDED, seq=ev.seq, actor=ev.actor)
            window_end = flight.started_at_us + self.policy.send_window_ms * 1000
            if flight.phase is Phase.SENDING and self.now_us < window_end:
                # Its send may still go out: the message ends now, the baton
                # passes once that call cannot go out any more.
                self.log(EventType.SKIPPED, flight.message, attempt=flight.attempt, **fields)
                state = self.record_end(state, flight.message, EventType.SKIPPED)
                return self.done(self.arm(state, replace(flight, skipped=True, due_at_us=window_end)))
            return self.done(self.end(state, EventType.SKIPPED, Trigger.SKIPPED, ev.idempotency_key, **fields))
        for i, m in enumerate(state.pending):
            if m.seq == ev.seq:
                self.log(EventType.SKIPPED, m, **fields)
                state = self.record_end(replace(state, pending=(*state.pending[:i], *state.pending[i + 1:])),
                                        m, EventType.SKIPPED)
                if state.in_flight is None and i == 0:
                    state = self.advance(state, Trigger.SKIPPED, ev.idempotency_key)
                return self.done(state)
        return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.NOT_HELD, seq=ev.seq, actor=ev.actor)

    def put(self, state: RoomState, msg: QueuedMessage, index: int | None) -> RoomState:
        """`state` with message `msg` replacing the one at `index` (None: in flight)."""
        if index is None:
            assert state.in_flight is not None
            return replace(state, in_flight=replace(state.in_flight, message=msg))
        return replace(state, pending=(*state.pending[:index], msg, *state.pending[index + 1:]))

    def prepared(self, ev: Prepared) -> Decision:
        """A preparation's result: stored with its message (the first result
        wins). The head waiting for it (PREPARING) starts at once, unless the
        room is paused (it then goes back to the head of the queue)."""
        ids = {"seq": ev.seq, "attempt": ev.attempt}
        found = self.state.message(ev.seq) if ev.incarnation == self.state.incarnation else None
        if found is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.NOT_HELD, **ids)
        msg, index = found
        if msg.prepared is not None or msg.prepare is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
        done = replace(msg, prepared=ev.media_id, prep_failed=None)
        if done.parked is not None and done.parked.startswith(PREPARE_PARK_REASON):
            done = replace(done, parked=None)  # parked for want of this result: it has come
        self.log(EventType.PREPARED, done, attempt=ev.attempt, provider_message_id=ev.media_id,
                 reason=f"attempt {ev.attempt} took {ev.took_ms:.0f} ms")
        state = self.put(self.state, done, index)
        flight = state.in_flight
        if index is None:
            assert flight is not None
            if flight.phase is not Phase.PREPARING:
                return self.done(state)
            self.cancel_pending_timer(state, flight)
            if state.paused is not None:
                return self.done(replace(state, in_flight=None, pending=(done, *state.pending)))
            return self.done(self.start(replace(state, in_flight=None), done, flight.attempt, Trigger.PREPARED,
                                        ev.idempotency_key))
        if flight is None and index == 0 and msg.parked is not None and done.parked is None:
            state = self.advance(state, Trigger.PREPARED, ev.idempotency_key)
        return self.done(state)

    def prepare_failed(self, ev: PrepareFailed) -> Decision:
        """A failed preparation attempt: retried after PREPARE_RETRY_BASE_MS x
        4^(n-1), until MAX_PREPARE_ATTEMPTS (or at once, for a permanent
        failure) the preparation is given up and PREPARE_POISON applies."""
        ids = {"seq": ev.seq, "attempt": ev.attempt}
        found = self.state.message(ev.seq) if ev.incarnation == self.state.incarnation else None
        if found is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.NOT_HELD, **ids)
        msg, index = found
        if not msg.needs_preparation or msg.prep_failed is not None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
        if ev.attempt != msg.prep_attempt:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.STALE_PREPARE_ATTEMPT, **ids)
        return self.done(self.preparation_failed(msg, index, ev.error, ev.permanent, ev.idempotency_key))

    def preparation_failed(self, msg: QueuedMessage, index: int | None, error: str, permanent: bool,
                           cause: str) -> RoomState:
        """Attempt `msg.prep_attempt` of `msg`'s preparation failed (or never
        answered): ask again after a backoff, or give the preparation up."""
        state = self.state
        attempt = msg.prep_attempt
        tries = attempt - msg.prep_floor  # since its (re)entry: what MAX_PREPARE_ATTEMPTS bounds
        if permanent or tries >= self.policy.max_prepare_attempts:
            why = f"{error} (attempt {attempt}{', permanent' if permanent else ''})"
            self.log(EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
                     reason="given up: " + ("permanent" if permanent else f"MAX_PREPARE_ATTEMPTS={tries}"))
            return self.give_up_preparation(state, msg, index, why, cause)
        delay_ms = self.policy.prepare_retry_base_ms * 4 ** (tries - 1)
        retry_at = self.now_us + delay_ms * 1000
        self.log(EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
                 reason=f"retry as attempt {attempt + 1} in {delay_ms} ms")
        again = replace(msg, prep_attempt=attempt + 1)
        self.effects.append(Prepare(state.room_id, state.incarnation, msg.seq, attempt + 1, retry_at))
        state = self.put(state, again, index)
        flight = state.in_flight
        if index is None and flight is not None and flight.phase is Phase.PREPARING:
            wake = max(flight.due_at_us, retry_at + self.policy.prepare_timeout_ms * 1000)
            state = self.wait_until(state, flight, wake)
        return state

    def give_up_preparation(self, state: RoomState, msg: QueuedMessage, index: int | None, why: str,
                            cause: str) -> RoomState:
        """PREPARE_POISON for a message whose preparation was given up: `park`
        parks it at once (it blocks its room when it reaches the head);
        `dead_letter` ends it when it reaches the head (at once if it is the
        head), so messages still end in their order."""
        failed = replace(msg, prep_failed=why[:500])
        if index is not None:
            if self.policy.prepare_poison == "park":
                failed = replace(failed, parked=f"{PREPARE_PARK_REASON}: {why}"[:500])
                self.log(EventType.PARKED, failed, reason=failed.parked)
            return self.put(state, failed, index)
        flight = state.in_flight
        assert flight is not None
        self.cancel_pending_timer(state, flight)
        state = replace(state, in_flight=None, pending=(failed, *state.pending))
        if state.paused is not None:
            return state
        return self.advance(state, Trigger.DEAD_LETTERED, cause)

    def pause(self, ev: Pause) -> Decision:
        if self.state.paused is not None:
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_PAUSED, actor=ev.actor)
        self.log(PAUSED, None, actor=ev.actor, reason=ev.reason)
        return self.done(replace(self.with_incarnation(), paused=Paused(ev.actor, ev.reason, self.now_us)))

    def resume(self, ev: Resume) -> Decision:
        if self.state.paused is None:
            return self.ignore(EventType.OPERATOR_IGNORED, IgnoreReason.NOT_PAUSED, actor=ev.actor)
        self.log(RESUMED, None, actor=ev.actor, reason=ev.reason)
        state = replace(self.state, paused=None)
        if state.in_flight is None:
            state = self.advance(state, Trigger.RESUME, ev.idempotency_key)
        return self.done(state)


# The rulebook's entry: which rule applies to which event. Anything else is refused.
_HANDLERS = {
    Enqueue: Transition.enqueue,
    Park: Transition.park,
    SendReturned: Transition.send_returned,
    StatusUpdate: Transition.status,
    RecipientReceipt: Transition.receipt,
    TimerFired: Transition.timer,
    WatchdogSweep: Transition.sweep,
    Redrive: Transition.redrive,
    Skip: Transition.skip,
    Pause: Transition.pause,
    Resume: Transition.resume,
    Prepared: Transition.prepared,
    PrepareFailed: Transition.prepare_failed,
}


# ---------------------------------------------------------------- the rulebook as data


class RoomPhase(StrEnum):
    """Where a whole room stands: the in-flight attempt's phase, or why nothing is in flight."""

    IDLE = "idle"  # nothing in flight, nothing sendable queued
    BLOCKED = "blocked"  # nothing in flight; the head of the queue is parked
    PAUSED = "paused"  # nothing in flight; an operator paused the room
    SENDING = "sending"
    SENT = "sent"
    UNKNOWN = "unknown"
    BACKOFF = "backoff"
    PACED = "paced"
    PREPARING = "preparing"


def room_phase(state: RoomState) -> RoomPhase:
    """The room's `RoomPhase`."""
    if state.in_flight is not None:
        return RoomPhase(str(state.in_flight.phase))
    if state.paused is not None:
        return RoomPhase.PAUSED
    return RoomPhase.BLOCKED if state.blocked_reason else RoomPhase.IDLE


def event_kind(event: RoomEvent) -> str:
    """The rulebook's name for an event (a column of `RULES`)."""
    match event:
        case Enqueue():
            return "push"
        case Park():
            return "dead-letter copy"
        case SendReturned(outcome=SendOutcome.REFUSED, permanent=True):
            return "send refused for good"
        case SendReturned():
            return f"send {event.outcome}"
        case StatusUpdate(status="delivered" | "read"):
            return "status delivered/read"
        case StatusUpdate():
            return f"status {event.status}"
        case RecipientReceipt():
            return "receipt by recipient"
        case TimerFired(seq=0):
            return "gap timer"
        case TimerFired():
            return "timer"
        case WatchdogSweep():
            return "watchdog"
        case Redrive():
            return "redrive"
        case Skip():
            return "skip"
        case Pause():
            return "pause"
        case Resume():
            return "resume"
        case Prepared():
            return "prepared"
        case PrepareFailed():
            return "prepare failed"
    raise TypeError(f"unknown room event {event!r}")


@dataclass(frozen=True)
class Rule:
    """In `phase`, an event of `kind` leaves the room in one of `then`; `what` says how."""

    phase: RoomPhase
    kind: str
    then: frozenset[RoomPhase]
    what: str


_P = RoomPhase
_WAITING = (_P.SENDING, _P.SENT, _P.UNKNOWN, _P.BACKOFF, _P.PACED, _P.PREPARING)
# After a message ends: the head starts (or waits for its preparation), or
# there is none, or it is parked, or the room is paused.
_NEXT = frozenset({_P.SENDING, _P.PREPARING, _P.IDLE, _P.BLOCKED, _P.PAUSED})


def _rules() -> tuple[Rule, ...]:
    rules = [
        Rule(_P.IDLE, "push", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "a new message takes the baton at once (timer armed, then sent); a known id is a duplicate; "
             "awaited pushes get placeholders ahead of it"),
        Rule(_P.BLOCKED, "push", frozenset({_P.BLOCKED, _P.SENDING}),
             "queued behind the parked head (or refused when full); the head's own push releases it"),
        Rule(_P.IDLE, "dead-letter copy", frozenset({_P.BLOCKED, _P.IDLE}),
             "parked at its place: the room blocks on it; a known id is a duplicate"),
        Rule(_P.BLOCKED, "dead-letter copy", frozenset({_P.BLOCKED}), "fills its placeholder or parks at the tail"),
        Rule(_P.BLOCKED, "redrive", frozenset({_P.SENDING, _P.BLOCKED}),
             "the parked head is released and sent (without its body yet: refused); a dead letter goes back "
             "ahead of the parked head and is sent"),
        Rule(_P.BLOCKED, "skip", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "the message ends as skipped; the next head starts"),
        Rule(_P.IDLE, "redrive", frozenset({_P.SENDING, _P.IDLE}),
             "a dead letter whose last end in this room is `dead_lettered` goes back to the head and is sent; "
             "anything else: ignored"),
        Rule(_P.IDLE, "skip", frozenset({_P.IDLE}), "nothing to act on: ignored"),
        Rule(_P.PAUSED, "push", frozenset({_P.PAUSED}), "queued; nothing starts while paused; refused (503) when full"),
        Rule(_P.PAUSED, "dead-letter copy", frozenset({_P.PAUSED}), "parked at its place in the queue"),
        Rule(_P.PAUSED, "redrive", frozenset({_P.PAUSED}),
             "a parked message is released, a dead letter goes back to the head; sent after the resume"),
        Rule(_P.PAUSED, "skip", frozenset({_P.PAUSED}), "a queued message ends as skipped; nothing starts"),
        Rule(_P.PAUSED, "pause", frozenset({_P.PAUSED}), "already paused: ignored"),
        Rule(_P.PAUSED, "resume", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "the pause is lifted: the head starts (or the room is idle, or blocked on a parked head)"),
        Rule(_P.IDLE, "pause", frozenset({_P.PAUSED}), "paused: messages are accepted, nothing starts"),
        Rule(_P.BLOCKED, "pause", frozenset({_P.PAUSED}), "paused (the parked head stays parked)"),
        Rule(_P.SENDING, "send accepted", frozenset({_P.SENT, _P.SENDING}) | _NEXT,
             "held until an ack or ack timeout after the send returned (an older attempt's outcome: ignored); "
             "the room moves on at once if an earlier attempt was acked meanwhile, if a receipt named this id "
             "before the return, or if the provider's ack level is `accepted`"),
        Rule(_P.SENDING, "send unknown", frozenset({_P.UNKNOWN, _P.SENDING}) | _NEXT,
             "possibly sent: held until an ack or ack timeout after the call returned, then resent; "
             "if an earlier attempt was acked meanwhile, the room moves on"),
        Rule(_P.SENDING, "send refused", frozenset({_P.BACKOFF}) | _NEXT,
             "provably not sent: retry timer (x4 per attempt; 4^n s for a pair rate limit); "
             "dead-lettered after MAX_SEND_ATTEMPTS, and the room moves on"),
        Rule(_P.SENDING, "send refused for good", _NEXT, "ends as failed with the platform's error; the room moves on"),
        Rule(_P.SENDING, "timer", frozenset({_P.SENDING}) | _NEXT,
             "no outcome recorded: wait until the send window (start deadline + send timeout) plus the ack "
             "timeout has passed, then resend as the next attempt (dead-letter after MAX_SEND_ATTEMPTS)"),
        Rule(_P.SENT, "timer", frozenset({_P.SENT}) | _NEXT,
             "before the ack deadline: a new timer for the rest; after it: ends as timed out, the room moves on"),
        Rule(_P.UNKNOWN, "timer", frozenset({_P.UNKNOWN}) | _NEXT,
             "before the deadline: a new timer for the rest; after it: resent as the next attempt"),
        Rule(_P.BACKOFF, "timer", frozenset({_P.BACKOFF}) | _NEXT,
             "before the retry time: a new timer for the rest; after it: resent as the next attempt"),
        Rule(_P.PREPARING, "timer", frozenset({_P.PREPARING}) | _NEXT,
             "before PREPARE_TIMEOUT_MS: a new timer for the rest; after it, no result came: the preparation is "
             "asked for again as its next attempt, or, after MAX_PREPARE_ATTEMPTS, given up: PREPARE_POISON "
             "(`dead_letter`: the message ends, the room moves on; `park`: the room blocks on it)"),
        Rule(_P.PREPARING, "prepared", frozenset({_P.SENDING, _P.PACED, _P.PAUSED}),
             "the head's media id is stored and it is sent at once (paced if its bucket is empty; paused "
             "meanwhile: it goes back to the head of the queue); a second result, or one for a queued "
             "message, is stored or ignored"),
        Rule(_P.PREPARING, "prepare failed", frozenset({_P.PREPARING}) | _NEXT,
             "the head's preparation is asked for again after PREPARE_RETRY_BASE_MS x4 per attempt; a permanent "
             "failure or MAX_PREPARE_ATTEMPTS gives it up: PREPARE_POISON; a queued message's: retried, or "
             "marked given up (parked at once under `park`)"),
        Rule(_P.PACED, "timer", frozenset({_P.PACED, _P.SENDING, _P.PAUSED}),
             "the room's pair-rate bucket has a token again: the attempt is sent (paused meanwhile: the message "
             "goes back to the head of the queue); early: a new timer for the rest"),
    ]
    for phase in _WAITING:
        rules += [
            Rule(phase, "push", frozenset({phase}), "queued behind the in-flight message; refused (503) when full"),
            Rule(phase, "dead-letter copy", frozenset({phase}), "parked at its place in the queue"),
            Rule(phase, "status delivered/read", _NEXT | {phase},
                 "any attempt of the in-flight message acks it if the status meets the provider's ack level "
                 "(ACK_LEVEL_*): the room moves on (an earlier attempt's ack while a resend is being sent: once "
                 "that send can no longer go out); other seqs, or below the ack level: ignored"),
            Rule(phase, "receipt by recipient", (_NEXT | {phase}) if phase in (_P.SENT,) else frozenset({phase}),
                 {_P.SENDING: "its mids are remembered: the send's return acks the message if its id is one of "
                              "them; a watermark alone proves nothing yet: ignored",
                  _P.SENT: "acks the message if a mid is its id, or the watermark is WATERMARK_MARGIN_MS past the "
                           "send's return (and the status meets the provider's ack level); otherwise ignored",
                  }.get(phase, "nothing sent is provably covered (no accepted send): ignored")),
            Rule(phase, "status failed", _NEXT | {phase},
                 "the in-flight attempt failed: ends as failed, the room moves on; other attempts: ignored"),
            Rule(phase, "watchdog", frozenset({phase}) | _NEXT,
                 "wake-up overdue by WATCHDOG_GRACE_MS: acts as its timer would; otherwise nothing"),
            Rule(phase, "redrive", frozenset({phase}),
                 "releases a parked queued message, or puts a dead letter back at the head of the queue: "
                 "it is sent when the in-flight message ends"),
            Rule(phase, "skip", frozenset({phase}) | _NEXT,
                 "the in-flight message ends as skipped and the room moves on, or a queued one is removed"
                 + (" (inside the send window, the baton passes only once the send can no longer go out)"
                    if phase is _P.SENDING else "")),
            Rule(phase, "pause", frozenset({phase}),
                 "paused: the in-flight message ends by its own rules; then nothing starts until the resume"),
            Rule(phase, "resume", frozenset({phase}), "the pause is lifted (if any); the in-flight message goes on"),
        ]
        if phase is not _P.PREPARING:
            rules += [
                Rule(phase, "prepared", frozenset({phase}),
                     "a queued message's media id is stored (the first result wins): it is sent in its turn"),
                Rule(phase, "prepare failed", frozenset({phase}),
                     "a queued message's preparation is asked for again after a backoff, or given up (parked at "
                     "once under PREPARE_POISON=park; ended when it reaches the head under `dead_letter`)"),
            ]
        if phase is not _P.SENDING:
            rules += [Rule(phase, kind, frozenset({phase}), "stale (the attempt's outcome is recorded): ignored")
                      for kind in ("send accepted", "send unknown", "send refused", "send refused for good")]
    for phase in (_P.IDLE, _P.BLOCKED, _P.PAUSED):
        rules += [Rule(phase, kind, frozenset({phase}), "nothing in flight: ignored (late or duplicate)")
                  for kind in ("send accepted", "send unknown", "send refused", "send refused for good",
                               "status delivered/read", "status failed", "receipt by recipient", "timer")]
        rules.append(Rule(phase, "watchdog", frozenset({phase}) | (_NEXT if phase is _P.IDLE else frozenset()),
                          "a sequence gap overdue by WATCHDOG_GRACE_MS: acts as its gap timer would; "
                          "otherwise nothing in flight: ignored"))
    rules += [Rule(phase, "resume", frozenset({phase}), "not paused: ignored") for phase in (_P.IDLE, _P.BLOCKED)]
    gap = ("past SEQUENCE_GAP_TIMEOUT_MS: the missing producer sequence numbers are given up (`sequence_gap`) and "
           "the held messages enter the queue in sequence order")
    rules += [Rule(phase, "gap timer", frozenset({phase}), gap + "; the in-flight message goes on")
              for phase in _WAITING]
    rules += [
        Rule(_P.IDLE, "gap timer", frozenset({_P.IDLE}) | _NEXT, gap + ": the first of them starts"),
        Rule(_P.BLOCKED, "gap timer", frozenset({_P.BLOCKED}), gap + " behind the parked head"),
        Rule(_P.PAUSED, "gap timer", frozenset({_P.PAUSED}), gap + "; nothing starts until the resume"),
    ]
    rules += [
        Rule(_P.IDLE, "prepared", frozenset({_P.IDLE}), "no message waits for it: ignored"),
        Rule(_P.IDLE, "prepare failed", frozenset({_P.IDLE}), "no message waits for it: ignored"),
        Rule(_P.BLOCKED, "prepared", frozenset({_P.BLOCKED}) | _NEXT | {_P.PACED},
             "stored with its message; a head parked for want of it is released and sent"),
        Rule(_P.BLOCKED, "prepare failed", frozenset({_P.BLOCKED}),
             "a queued message's preparation is retried or given up, as in any phase"),
        Rule(_P.PAUSED, "prepared", frozenset({_P.PAUSED}), "stored with its message; sent after the resume"),
        Rule(_P.PAUSED, "prepare failed", frozenset({_P.PAUSED}),
             "retried, or given up (PREPARE_POISON applies after the resume)"),
    ]
    rules += [Rule(phase, "status sent", frozenset({phase}), "the platform took it; only delivered/read ack: ignored")
              for phase in _P]
    # Wherever a message may start, it may start by waiting for its preparation.
    return tuple(replace(r, then=r.then | {_P.PREPARING}) if _P.SENDING in r.then else r for r in rules)


RULES: tuple[Rule, ...] = _rules()
_RULE_INDEX = {(r.phase, r.kind): r for r in RULES}


def rule_for(before: RoomState, event: RoomEvent) -> Rule:
    """The rule of `RULES` that covers `event` in the room's phase.

    Raises:
        KeyError: no rule covers it (the table and `decide` disagree).
    """
    return _RULE_INDEX[(room_phase(before), event_kind(event))]


def policy_from_settings(settings: Settings) -> Policy:
    """Build a `Policy` from the environment's settings."""
    return Policy(
        ack_timeout_ms=settings.ack_timeout_ms,
        send_timeout_ms=settings.send_timeout_ms,
        send_start_deadline_ms=settings.send_start_deadline_ms,
        max_send_attempts=settings.max_send_attempts,
        send_retry_base_ms=settings.send_retry_base_ms,
        dedup_retention=settings.dedup_retention,
        max_queued_messages=settings.max_queued_messages,
        max_room_bytes=settings.max_room_bytes,
        watchdog_grace_ms=settings.watchdog_grace_ms,
        ack_levels=tuple(settings.ack_levels.items()),
        pacing=tuple((p, *settings.pacing[p]) for p in settings.pacing),
        watermark_margin_ms=settings.watermark_margin_ms,
        prepare_ahead=settings.prepare_ahead,
        prepare_timeout_ms=settings.prepare_timeout_ms,
        max_prepare_attempts=settings.max_prepare_attempts,
        prepare_retry_base_ms=settings.prepare_retry_base_ms,
        prepare_poison=settings.prepare_poison,
        sequence_gap_timeout_ms=settings.sequence_gap_timeout_ms,
    )
