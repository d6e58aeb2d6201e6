"""The room's state and policy: what one room document holds, and the knobs.

Decides nothing: plain data and the few facts derived from it. Must not
touch I/O, the events or the effects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

# What a send call's caller knows when it returns: one definition, the send
# interface's (shared/providers/base.py; importing it loads no client).
from shared.providers.base import SendOutcome as SendOutcome

if TYPE_CHECKING:
    from shared.config import Settings


class Phase(StrEnum):
    """Where the in-flight attempt stands."""

    SENDING = "sending"  # decided; the send call may be under way; no outcome recorded
    SENT = "sent"  # the platform accepted the send; held until an ack or the ack deadline
    UNKNOWN = "unknown"  # the send's outcome is unknown: possibly sent; held like SENT, then resent
    BACKOFF = "backoff"  # provably not sent; waiting for the retry
    PACED = "paced"  # not sent yet: waiting for a token of the room's pair-rate bucket
    PREPARING = "preparing"  # not sent yet: waiting for the message's preparation (a media upload)

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
    NOT_IN_ROOM = "not_held"  # no message of that seq or id in the room (the logged value keeps its old name)
    ACKED_WHILE_RESENDING = "acked_while_resending"
    ALREADY_PAUSED = "already_paused"
    NOT_PAUSED = "not_paused"
    ALREADY_ENDED = "already_ended"  # skipped, or acked while its resend is being sent
    ALREADY_IN_ROOM = "already_held"  # a dead letter redriven already: the room holds it again (logged value unchanged)
    NOT_DEAD_LETTERED = "not_dead_lettered"  # the room remembers no dead-lettered end of that message
    BELOW_ACK_LEVEL = "below_ack_level"  # e.g. `delivered` where the provider's ack level is `read`
    RECEIPT_COVERS_NOTHING = "receipt_covers_nothing_in_flight"  # a watermark or mids that prove nothing here
    ALREADY_PREPARED = "already_prepared"  # a second result of a preparation: the room keeps the first
    STALE_PREPARE_ATTEMPT = "stale_prepare_attempt"  # a failure of an attempt a later one has replaced
    OTHER_SENDER = "other_sender"  # a WhatsApp status of a number this deployment does not send from
    WRONG_SENDER = "wrong_sender"  # a WhatsApp status naming an attempt, from a number it was not sent from

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
    - `sender`: the WhatsApp phone-number id it is sent from (None: the
      deployment's first number; other platforms have one sender).
    - `payload`: the producer's `data` as JSON text, for a kind that `text`
      and `media_kind`/`media_link` cannot carry (a template, a location,
      a document's file name...; shared/contract); None otherwise.
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
    sender: str | None = None
    payload: str | None = None

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
    - `early_watermark_us`, `early_watermark_status`: the watermark (epoch
      us) of a receipt that came before both the call's return and the
      platform's echo, and its status (the one that covers most, by
      `watermark_covers`); judged once the echo's stamp is known, with the
      same strictness as any watermark.
    - `number`: WhatsApp: the phone-number id this attempt goes out from,
      fixed when it is sent (`shared.senders.sent_from` over the Policy's
      numbers); a status of this attempt from another number is ignored.
      None for other platforms and for attempts stored before it was kept.
    - `platform_ts_us`: the platform's own stamp of this attempt (epoch us),
      from its echo (Messenger `message_echoes`, Instagram `is_echo`) or, with
      WHATSAPP_SENT_PROOF on, its WhatsApp `sent` status (whole seconds):
      what a Messenger watermark is judged against (same clock), and proof
      that the platform took the attempt. None: no such record yet.
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
    platform_ts_us: int | None = None
    number: str | None = None
    early_watermark_us: int | None = None
    early_watermark_status: str | None = None

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
    - `expected_sequence`: the producer `sequence` the room expects next (from 1);
      `sequence_held`: messages whose `sequence` is beyond it, in sequence order,
      waiting outside the queue (seq 0 until they enter; logged
      `sequence_held`); `gap_due_us`: when the room stops waiting for the
      missing ones (its gap timer). The document stores the two as
      `next_sequence` and `held` (shared/room_document.py).
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
    expected_sequence: int = 1
    sequence_held: tuple[QueuedMessage, ...] = ()
    gap_due_us: int | None = None

    @property
    def wake_at_us(self) -> int | None:
        """When the room must be woken (its in-flight timer's or its gap
        timer's due time, the earlier), or None."""
        due = [t for t in (self.in_flight.due_at_us if self.in_flight is not None else None,
                           self.gap_due_us if self.sequence_held else None) if t is not None]
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
        return self.in_flight is not None or bool(self.pending) or bool(self.awaiting) or bool(self.sequence_held)

    def message_ids(self) -> set[str]:
        """The ids of every message in the room: in flight, queued
        (placeholders included) and sequence-held."""
        ids = {m.message_id for m in self.pending} | {m.message_id for m in self.sequence_held}
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
      after `started + ack_timeout` (FIRST_TIMER_SLACK_MS, default 0). The
      deadline counts from the send's return, so a timer that comes before it
      arms another for the rest: 0 adds no wait to any timeout, at the cost of
      that second timer for a message whose send returned later than the
      timer's dispatch lag; a slack trades wait for fewer second timers.
    - `ack_levels`: per provider, what acks a message (`ack_level`).
    - `pacing`: per provider, a token bucket per room: one token every
      `interval_ms`, at most `burst` kept; a send takes one. WhatsApp's pair
      rate limit is about one message every 6 s to one user, with bursts of
      up to 45 borrowed against later time (error 131056:
      https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
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
    - `whatsapp_numbers`: the deployment's WhatsApp phone-number ids
      (WHATSAPP_SENDERS, the first the default), to fix each attempt's
      `number`.
    - `max_room_bytes`: Firestore storage size of the room document (see
      shared/docsize.py) above which a new message is refused; the rest up to
      1 MiB is the reserve for placeholders and markers, which are never refused.
      `room_bytes` measures it: the store adapter's `room_doc_bytes`
      (shared/room_document.py; the room does not know its stored form),
      which the service sets (`ServiceCore`); None: not measured, no limit.
    """

    ack_timeout_ms: int = 3000
    send_timeout_ms: int = 2000
    send_start_deadline_ms: int = 2000
    first_timer_slack_ms: int = 0
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
    whatsapp_numbers: tuple[str, ...] = ()
    prepare_timeout_ms: int = 30_000
    max_prepare_attempts: int = 4
    prepare_retry_base_ms: int = 1000
    prepare_poison: str = "dead_letter"  # or "park"
    sequence_gap_timeout_ms: int = 30_000
    room_bytes: Callable[[RoomState], int] | None = field(default=None, compare=False, repr=False)

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


# The reason a message parked because its preparation was given up starts with this.
PREPARE_PARK_REASON = "preparation failed"

ACK_STATUSES = frozenset({"delivered", "read"})

ACK_LEVELS = ("delivered", "read", "accepted")

def acks(level: str, status: str) -> bool:
    """Whether a platform status acks a message under ack level `level`."""
    if level == "read":
        return status == "read"
    return level == "delivered" and status in ACK_STATUSES

def watermark_covers(status: str, watermark_us: int, stamp_us: int) -> bool:
    """Whether a Messenger receipt's watermark proves the message stamped
    `stamp_us` (the platform's clock, epoch us) was delivered or read: a
    delivery watermark covers every message sent strictly before it, a read
    watermark every one at or before it
    (https://developers.facebook.com/docs/messenger-platform/reference/webhook-events/message-deliveries,
    .../message-reads). Equal to the stamp, a delivery watermark proves
    nothing about that message."""
    return watermark_us >= stamp_us if status == "read" else watermark_us > stamp_us

def awaits_platform_proof(state: RoomState, incarnation: int, seq: int, attempt: int, number: str | None) -> bool:
    """Whether the platform's own record of attempt (incarnation, seq,
    attempt) sent from `number` (a WhatsApp phone-number id, None: not
    named) would change what the room does: it is the in-flight attempt, no
    such record came yet, and its send outcome is not known to be accepted
    (SENDING: the send may be under way or its outcome lost; UNKNOWN). Only
    then does WHATSAPP_SENT_PROOF write a `sent` status into the room. A
    WhatsApp send that returned accepted stays SENDING here until its timer,
    which carries the acceptance, fires (issue 46): its `sent` status, when
    no instance settled it (`SentProofRecord`), costs a read and the echo's
    write, the platform's record that also covers a crash between the send
    and the arm; a send outcome recorded in a transaction costs a read, no
    write.
    """
    flight = state.in_flight
    return (flight is not None and state.incarnation == incarnation and flight.message.seq == seq
            and flight.attempt == attempt and flight.platform_ts_us is None
            and flight.phase in (Phase.SENDING, Phase.UNKNOWN)
            and (number is None or flight.number in (None, number)))

def ack_deadline_us(policy: Policy, returned_at_us: int) -> int:
    """The end of a sent message's ack wait: `ACK_TIMEOUT_MS` after its send returned."""
    return returned_at_us + policy.ack_timeout_ms * 1000

def policy_from_settings(settings: Settings) -> Policy:
    """Build a `Policy` from the environment's settings."""
    return Policy(
        ack_timeout_ms=settings.ack_timeout_ms,
        send_timeout_ms=settings.send_timeout_ms,
        send_start_deadline_ms=settings.send_start_deadline_ms,
        first_timer_slack_ms=settings.first_timer_slack_ms,
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
        whatsapp_numbers=tuple(spec.phone_number_id for spec in settings.whatsapp_sender_specs),
        prepare_timeout_ms=settings.prepare_timeout_ms,
        max_prepare_attempts=settings.max_prepare_attempts,
        prepare_retry_base_ms=settings.prepare_retry_base_ms,
        prepare_poison=settings.prepare_poison,
        sequence_gap_timeout_ms=settings.sequence_gap_timeout_ms,
    )
