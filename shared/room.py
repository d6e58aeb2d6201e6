"""The pure state machine of one room: `decide(state, event, policy) -> Decision`.

No I/O happens here. The store adapter (shared/store.py) reads a room's state,
calls `decide`, and commits the new state with a conditional write (an
optimistic transaction); only after the commit does the service run the
effects (arm a timer, send a message, log events). The read-decide-write loop
may run several times, so effects are data until then.

The baton: a room has at most one message in flight (sent or being sent, not
yet ended). Its queue (`pending`) holds the later messages in publish order.
A message ends exactly once, as one of: acked, failed, timed out, dead-lettered.
When the in-flight message ends, the head of the queue starts at once, in the
same transaction: there is no moment where the room is idle while it holds a
sendable message (no lost wake-up).

Fencing: each send of a message is an attempt (1, 2, ...). A timer carries the
(seq, attempt) it was made for and applies only while exactly that attempt is
in flight; a status names the attempt through its delivery id.

Times are epoch microseconds (`*_us`) inside the state and events.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from shared.events import DeliveryEvent, EventType, utc_iso

if TYPE_CHECKING:
    from shared.config import Settings


class Phase(StrEnum):
    """Where the in-flight attempt stands."""

    SENDING = "sending"  # the send was decided; it is under way or done
    BACKOFF = "backoff"  # the send failed transiently; a retry timer is set


class TimerKind(StrEnum):
    """Why a Cloud Tasks timer was set."""

    ACK_TIMEOUT = "ack_timeout"  # no ack within ACK_TIMEOUT_MS: the message counts as sent
    RETRY = "retry"  # resend after a transient send failure


class Receipt(StrEnum):
    """What the store knows about a send attempt when its ack timeout fires."""

    CONFIRMED = "confirmed"  # the platform accepted the send (a receipt was written)
    MISSING = "missing"  # no receipt: the sender crashed or the receipt write failed


@dataclass(frozen=True)
class QueuedMessage:
    """An accepted message. `text` is the body; it is never logged."""

    seq: int
    message_id: str
    provider: str
    recipient: str
    text: str
    published_at_us: int
    enqueued_at_us: int

    @property
    def size_bytes(self) -> int:
        """Rough stored size, for the per-room backlog limit."""
        return len(self.text.encode()) + len(self.message_id) + len(self.recipient) + 64


@dataclass(frozen=True)
class InFlight:
    """The one message of a room that holds the baton.

    `cause` is the idempotency key of the request that started this attempt: a
    redelivery of that same request finds it here and re-arms the ack timer
    (the first delivery may have died between its commit and its effects).
    """

    message: QueuedMessage
    attempt: int
    started_at_us: int
    phase: Phase
    cause: str


@dataclass(frozen=True)
class RoomState:
    """Everything baton keeps about one room (one Firestore document).

    - `next_seq`: the seq the next accepted message gets (from 1).
    - `recent_ids`: message ids already accepted, newest last, at most
      `Policy.dedup_window` of them: the de-duplication window.
    - `ended`: the outcome of recently ended seqs (newest last, bounded), so a
      late status can be told apart from a duplicate one.
    - `counts`: how many messages ended each way.
    """

    room_id: str
    next_seq: int = 1
    in_flight: InFlight | None = None
    pending: tuple[QueuedMessage, ...] = ()
    recent_ids: tuple[str, ...] = ()
    ended: tuple[tuple[int, str], ...] = ()
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def pending_bytes(self) -> int:
        return sum(m.size_bytes for m in self.pending)


@dataclass(frozen=True)
class Policy:
    """The knobs `decide` needs; built from shared.config.Settings. Times in ms."""

    ack_timeout_ms: int = 3000
    max_send_attempts: int = 5
    send_retry_base_ms: int = 1000
    dedup_window: int = 1000
    max_pending_bytes: int = 600_000
    ended_window: int = 64


# ---------------------------------------------------------------- events in


@dataclass(frozen=True)
class Enqueue:
    """A push of one producer message (already validated)."""

    message_id: str
    provider: str
    recipient: str
    text: str
    published_at_us: int
    at_us: int

    @property
    def key(self) -> str:
        return f"push:{self.message_id}"


@dataclass(frozen=True)
class StatusUpdate:
    """A platform status for one attempt: `sent`, `delivered`, `read` or `failed`.

    `sent_at_us` is the attempt's start, decoded from the delivery id.
    """

    seq: int
    attempt: int
    status: str
    sent_at_us: int
    at_us: int
    provider_message_id: str | None = None
    error_code: int | None = None
    error_title: str | None = None

    @property
    def key(self) -> str:
        return f"status:{self.seq}.{self.attempt}:{self.status}"


@dataclass(frozen=True)
class TimerFired:
    """A Cloud Tasks timer for (seq, attempt) came due. `receipt` is looked up
    by the adapter for ACK_TIMEOUT timers only."""

    seq: int
    attempt: int
    kind: TimerKind
    at_us: int
    receipt: Receipt | None = None

    @property
    def key(self) -> str:
        return f"timer:{self.seq}.{self.attempt}:{self.kind}"


@dataclass(frozen=True)
class SendFailed:
    """A send call for (seq, attempt) failed.

    `permanent`: the platform refused the message for good (e.g. WhatsApp
    131026 undeliverable, 131047 outside the 24 h window); otherwise it may be
    retried after `retry_after_ms` (None: the policy's backoff).
    """

    seq: int
    attempt: int
    permanent: bool
    at_us: int
    error_code: int | None = None
    error_title: str | None = None
    retry_after_ms: int | None = None

    @property
    def key(self) -> str:
        return f"sendfail:{self.seq}.{self.attempt}"


RoomEvent = Enqueue | StatusUpdate | TimerFired | SendFailed

ACK_STATUSES = frozenset({"delivered", "read"})


# ---------------------------------------------------------------- effects out


@dataclass(frozen=True)
class Send:
    """Send `message` as `attempt`. `trigger` names what freed the room
    (`enqueue`, `ack`, `failed`, `timed_out`, `dead_lettered`, `retry`,
    `resend`); `trigger_at_us` is when that request arrived."""

    room_id: str
    message: QueuedMessage
    attempt: int
    delivery_id: str
    trigger: str
    trigger_at_us: int


@dataclass(frozen=True)
class ScheduleTimer:
    """Set a Cloud Tasks timer for (seq, attempt) due at `due_at_us`."""

    room_id: str
    seq: int
    attempt: int
    kind: TimerKind
    due_at_us: int


@dataclass(frozen=True)
class KeepDeadLetter:
    """Keep a message baton gave up on, with its body, for a later redrive.
    Written in the same transaction as the room."""

    room_id: str
    message: QueuedMessage
    attempts: int
    reason: str


Effect = Send | ScheduleTimer | KeepDeadLetter


@dataclass(frozen=True)
class Decision:
    """The result of one event: the new state (None: nothing to write), the
    effects to run after the commit, and the events to log after the commit.
    `refused` is set when the room pushes back (backlog full): write nothing,
    answer 503 so Pub/Sub redelivers later."""

    state: RoomState | None
    effects: tuple[Effect, ...] = ()
    events: tuple[DeliveryEvent, ...] = ()
    refused: str | None = None


# ---------------------------------------------------------------- delivery ids


def make_delivery_id(room_id: str, seq: int, attempt: int, started_at_us: int) -> str:
    """Our id of one attempt, `"{seq}.{attempt}.{started_ms}.{room_id}"`.

    It travels as WhatsApp's `biz_opaque_callback_data` (at most 512 characters,
    https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages)
    and comes back in every status webhook, so a status names its room and
    attempt without a lookup, and a late ack still knows its send time.
    """
    return f"{seq}.{attempt}.{started_at_us // 1000}.{room_id}"


def parse_delivery_id(delivery_id: str) -> tuple[str, int, int, int]:
    """Inverse of `make_delivery_id`: (room_id, seq, attempt, started_at_us).

    Raises:
        ValueError: not a delivery id baton made.
    """
    parts = delivery_id.split(".", 3)
    if len(parts) != 4 or not parts[3]:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    seq, attempt, started_ms = (int(p) for p in parts[:3])
    if seq < 1 or attempt < 1:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    return parts[3], seq, attempt, started_ms * 1000


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
    ctx = _Ctx(state, policy, component, event.at_us)
    match event:
        case Enqueue():
            return ctx.enqueue(event)
        case StatusUpdate():
            return ctx.status(event)
        case TimerFired():
            return ctx.timer(event)
        case SendFailed():
            return ctx.send_failed(event)
    raise TypeError(f"unknown room event {event!r}")


class _Ctx:
    """One `decide` call: accumulates effects and log events."""

    def __init__(self, state: RoomState, policy: Policy, component: str, now_us: int) -> None:
        self.state = state
        self.policy = policy
        self.component = component
        self.now_us = now_us
        self.effects: list[Effect] = []
        self.events: list[DeliveryEvent] = []

    # -- helpers

    def log(self, event: EventType, msg: QueuedMessage | None = None, **fields: object) -> None:
        if msg is not None:
            fields.setdefault("seq", msg.seq)
            fields.setdefault("message_id", msg.message_id)
            fields.setdefault("provider", msg.provider)
        self.events.append(
            DeliveryEvent(
                event=event,
                ts=utc_iso(self.now_us),
                component=self.component,
                room_id=self.state.room_id,
                **fields,  # type: ignore[arg-type]
            )
        )

    def done(self, state: RoomState | None) -> Decision:
        return Decision(state, tuple(self.effects), tuple(self.events))

    def ignore(self, event: EventType, reason: str, **fields: object) -> Decision:
        """Log an event that changes nothing, keeping the current state."""
        self.log(event, reason=reason, **fields)
        return self.done(None)

    def start(self, state: RoomState, msg: QueuedMessage, attempt: int, trigger: str, cause: str) -> RoomState:
        """Give `msg` the baton as `attempt`: arm its ack timer, then send it."""
        flight = InFlight(msg, attempt, self.now_us, Phase.SENDING, cause)
        self.effects.append(
            ScheduleTimer(
                state.room_id,
                msg.seq,
                attempt,
                TimerKind.ACK_TIMEOUT,
                self.now_us + self.policy.ack_timeout_ms * 1000,
            )
        )
        self.effects.append(
            Send(
                state.room_id,
                msg,
                attempt,
                make_delivery_id(state.room_id, msg.seq, attempt, self.now_us),
                trigger,
                self.now_us,
            )
        )
        return replace(state, in_flight=flight)

    def end(self, state: RoomState, outcome: EventType, trigger: str, cause: str, **fields: object) -> RoomState:
        """End the in-flight message as `outcome` and pass the baton to the head
        of the queue, if any (same transaction: no lost wake-up)."""
        flight = state.in_flight
        assert flight is not None
        self.log(outcome, flight.message, attempt=flight.attempt, **fields)
        counts = dict(state.counts)
        counts[str(outcome)] = counts.get(str(outcome), 0) + 1
        ended = (*state.ended, (flight.message.seq, str(outcome)))[-self.policy.ended_window :]
        state = replace(state, in_flight=None, counts=counts, ended=ended)
        if state.pending:
            head, *rest = state.pending
            state = replace(state, pending=tuple(rest))
            state = self.start(state, head, 1, trigger, cause)
        return state

    def give_up(self, state: RoomState, reason: str, trigger: str, cause: str) -> RoomState:
        flight = state.in_flight
        assert flight is not None
        self.effects.append(KeepDeadLetter(state.room_id, flight.message, flight.attempt, reason))
        return self.end(state, EventType.DEAD_LETTERED, trigger, cause, reason=reason)

    def resend(self, state: RoomState, trigger: str, cause: str) -> RoomState:
        """Send the in-flight message again as the next attempt, or dead-letter
        it once `max_send_attempts` is used up."""
        flight = state.in_flight
        assert flight is not None
        if flight.attempt >= self.policy.max_send_attempts:
            return self.give_up(state, f"no confirmed send after {flight.attempt} attempts", trigger, cause)
        return self.start(state, flight.message, flight.attempt + 1, trigger, cause)

    def matches(self, seq: int, attempt: int | None = None) -> bool:
        flight = self.state.in_flight
        if flight is None or flight.message.seq != seq:
            return False
        return attempt is None or flight.attempt == attempt

    def rearm_if_replay(self, key: str) -> None:
        """A redelivered request that started the in-flight attempt re-arms its
        ack timer (idempotent by task name): its first delivery may have died
        after the commit and before the timer was set."""
        flight = self.state.in_flight
        if flight is not None and flight.cause == key and flight.phase is Phase.SENDING:
            self.effects.append(
                ScheduleTimer(
                    self.state.room_id,
                    flight.message.seq,
                    flight.attempt,
                    TimerKind.ACK_TIMEOUT,
                    flight.started_at_us + self.policy.ack_timeout_ms * 1000,
                )
            )

    # -- events

    def enqueue(self, ev: Enqueue) -> Decision:
        state = self.state
        if ev.message_id in state.recent_ids:
            self.rearm_if_replay(ev.key)
            return self.ignore(EventType.DUPLICATE_IGNORED, "duplicate_push", message_id=ev.message_id, provider=ev.provider)
        msg = QueuedMessage(
            seq=state.next_seq,
            message_id=ev.message_id,
            provider=ev.provider,
            recipient=ev.recipient,
            text=ev.text,
            published_at_us=ev.published_at_us,
            enqueued_at_us=ev.at_us,
        )
        if state.in_flight is not None and state.pending_bytes + msg.size_bytes > self.policy.max_pending_bytes:
            return Decision(None, refused=f"room backlog over {self.policy.max_pending_bytes} bytes")
        recent = (*state.recent_ids, ev.message_id)[-self.policy.dedup_window :]
        state = replace(state, next_seq=state.next_seq + 1, recent_ids=recent)
        self.log(EventType.ENQUEUED, msg, published_at=utc_iso(ev.published_at_us))
        if state.in_flight is None:
            state = self.start(state, msg, 1, "enqueue", ev.key)
        else:
            state = replace(state, pending=(*state.pending, msg))
        return self.done(state)

    def status(self, ev: StatusUpdate) -> Decision:
        ids = {"attempt": ev.attempt, "status": ev.status, "provider_message_id": ev.provider_message_id}
        if ev.status == "sent":
            # The platform accepted the message; only delivered/read ack it.
            return self.ignore(EventType.STATUS_IGNORED, "sent_status", seq=ev.seq, **ids)
        if ev.seq >= self.state.next_seq:
            # No message of this room ever had this seq: not our delivery.
            return self.ignore(EventType.STATUS_UNKNOWN, "unknown_delivery", seq=ev.seq, **ids)
        if not self.matches(ev.seq):
            self.rearm_if_replay(ev.key)
            return self.ignore(EventType.STATUS_IGNORED, self._stale_reason(ev), seq=ev.seq,
                               send_to_ack_ms=self._late_ack_ms(ev), **ids)
        flight = self.state.in_flight
        assert flight is not None
        if ev.status in ACK_STATUSES:
            # Any attempt of this seq reaching the device acks the message.
            state = self.end(self.state, EventType.ACKED, "ack", ev.key,
                             status=ev.status, provider_message_id=ev.provider_message_id,
                             send_to_ack_ms=(ev.at_us - ev.sent_at_us) / 1000)
            return self.done(state)
        if ev.status == "failed":
            if ev.attempt != flight.attempt:
                return self.ignore(EventType.STATUS_IGNORED, "failed_for_older_attempt", seq=ev.seq, **ids)
            state = self.end(self.state, EventType.FAILED, "failed", ev.key,
                             status=ev.status, provider_message_id=ev.provider_message_id,
                             error_code=ev.error_code, error_title=ev.error_title)
            return self.done(state)
        return self.ignore(EventType.STATUS_IGNORED, "unknown_status", seq=ev.seq, **ids)

    def _stale_reason(self, ev: StatusUpdate) -> str:
        outcome = dict(self.state.ended).get(ev.seq)
        if outcome is None:
            return "not_in_flight"
        if ev.status in ACK_STATUSES and outcome == EventType.TIMED_OUT:
            return "late_ack"
        return f"after_{outcome}"

    def _late_ack_ms(self, ev: StatusUpdate) -> float | None:
        if ev.status in ACK_STATUSES and dict(self.state.ended).get(ev.seq) == EventType.TIMED_OUT:
            return (ev.at_us - ev.sent_at_us) / 1000
        return None

    def timer(self, ev: TimerFired) -> Decision:
        flight = self.state.in_flight
        if not self.matches(ev.seq, ev.attempt):
            self.rearm_if_replay(ev.key)
            return self.ignore(EventType.TIMEOUT_IGNORED, "not_in_flight", seq=ev.seq, attempt=ev.attempt, trigger=str(ev.kind))
        assert flight is not None
        if ev.kind is TimerKind.RETRY:
            if flight.phase is not Phase.BACKOFF:
                return self.ignore(EventType.TIMEOUT_IGNORED, "not_in_backoff", seq=ev.seq, attempt=ev.attempt, trigger=str(ev.kind))
            return self.done(self.resend(self.state, "retry", ev.key))
        if flight.phase is Phase.BACKOFF:
            # The retry timer owns this attempt now.
            return self.ignore(EventType.TIMEOUT_IGNORED, "in_backoff", seq=ev.seq, attempt=ev.attempt, trigger=str(ev.kind))
        if ev.receipt is Receipt.CONFIRMED:
            return self.done(self.end(self.state, EventType.TIMED_OUT, "timed_out", ev.key))
        # No receipt: the send may never have happened. A user not receiving a
        # message is worse than a duplicate, so send it again.
        return self.done(self.resend(self.state, "resend", ev.key))

    def send_failed(self, ev: SendFailed) -> Decision:
        flight = self.state.in_flight
        if not self.matches(ev.seq, ev.attempt) or flight is None or flight.phase is not Phase.SENDING:
            return self.ignore(EventType.STATUS_IGNORED, "send_failure_not_in_flight", seq=ev.seq, attempt=ev.attempt,
                               error_code=ev.error_code, error_title=ev.error_title)
        if ev.permanent:
            state = self.end(self.state, EventType.FAILED, "failed", ev.key,
                             error_code=ev.error_code, error_title=ev.error_title, reason="send_refused")
            return self.done(state)
        if flight.attempt >= self.policy.max_send_attempts:
            reason = f"send failed {flight.attempt} times; last error {ev.error_code}: {ev.error_title}"
            return self.done(self.give_up(self.state, reason, "dead_lettered", ev.key))
        delay_ms = ev.retry_after_ms
        if delay_ms is None:
            delay_ms = self.policy.send_retry_base_ms * 4 ** (flight.attempt - 1)
        state = replace(self.state, in_flight=replace(flight, phase=Phase.BACKOFF))
        self.effects.append(
            ScheduleTimer(state.room_id, ev.seq, ev.attempt, TimerKind.RETRY, self.now_us + delay_ms * 1000)
        )
        return self.done(state)


def policy_from_settings(settings: Settings) -> Policy:
    """Build a `Policy` from the environment's settings."""
    return Policy(
        ack_timeout_ms=settings.ack_timeout_ms,
        max_send_attempts=settings.max_send_attempts,
        send_retry_base_ms=settings.send_retry_base_ms,
        dedup_window=settings.dedup_window,
        max_pending_bytes=settings.max_pending_bytes,
    )

