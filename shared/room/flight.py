"""Flight rules: the in-flight attempt's send outcome, one function per
outcome, and the platform's statuses naming it, one per what the status
proves (its timers and the watchdog: timers.py; receipts by recipient:
receipts.py).

Decides when the message holding the baton ends or is sent again; must not
touch how messages enter (entry.py) or operator actions.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import Transition, arm, current, log, send_tries
from shared.room.effects import Decision
from shared.room.inputs import SendReturned, StatusUpdate
from shared.room.pacing import bucket_now
from shared.room.receipts import kept_watermark_acks
from shared.room.state import (
    ACK_STATUSES,
    IgnoreReason,
    InFlight,
    Phase,
    Trigger,
    ack_deadline_us,
    acks,
)
from shared.room.transition import done, end, give_up, ignore, rearm_if_replay, release


def stale_send_outcome(t: Transition, ev: SendReturned) -> Decision:
    """A send outcome for an attempt that is not the one being sent (an
    older attempt, one whose outcome is recorded, or nothing in flight):
    ignored."""
    return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.STALE_SEND_OUTCOME, seq=ev.seq,
                  attempt=ev.attempt, status=str(ev.outcome))


def _call_over(t: Transition, ev: SendReturned) -> InFlight | Decision:
    """What every send outcome checks first: the attempt it names (else
    ignored as stale); skipped while the call was under way (the baton
    passes now); an earlier attempt acked meanwhile (the message ends now).
    Returns the in-flight attempt when none of these applies."""
    flight = current(t, ev.incarnation, ev.seq, ev.attempt)
    if flight is None or flight.phase is not Phase.SENDING:
        return stale_send_outcome(t, ev)
    if flight.skipped:
        return done(t, release(t, t.state, Trigger.SKIPPED, ev.cause))
    if flight.acked_early is not None:
        return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.cause, status=flight.acked_early))
    return flight


def send_accepted(t: Transition, ev: SendReturned) -> Decision:
    """The platform accepted the send (2xx): acked at once at ack level
    `accepted`, or if a receipt named its id (or a kept watermark covers its
    echo) before the return; else SENT, held `ack_timeout_ms` from now."""
    flight = _call_over(t, ev)
    if isinstance(flight, Decision):
        return flight
    level = t.policy.ack_level(flight.message.provider)
    acked = {"provider_message_id": ev.provider_message_id, "send_to_ack_ms": (ev.at_us - flight.started_at_us) / 1000}
    if level == "accepted":
        return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.cause, status="accepted", **acked))
    if ev.provider_message_id is not None and ev.provider_message_id in flight.early_mids \
            and flight.early_mids_status is not None and acks(level, flight.early_mids_status):
        # A receipt named this message before its send call returned.
        return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.cause, status=flight.early_mids_status,
                           **acked))
    if kept_watermark_acks(flight):
        # A watermark that came before this return and before the echo
        # covers the echo's stamp, known now.
        acked["provider_message_id"] = ev.provider_message_id or flight.provider_message_id
        return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.cause,
                           status=flight.early_watermark_status, **acked))
    # The message is held ack_timeout from now. The timer armed at the
    # start stays; if it comes earlier it arms another for the rest.
    flight = replace(flight, phase=Phase.SENT, deadline_us=ack_deadline_us(t.policy, ev.at_us))
    if ev.provider_message_id is not None:
        # Recorded by a transaction (not the blind-written acceptance):
        # what a receipt by recipient is matched against. A kept
        # watermark stays until the echo's stamp comes.
        flight = replace(flight, provider_message_id=ev.provider_message_id, returned_at_us=ev.at_us,
                         early_mids=(), early_mids_status=None)
    return done(t, replace(t.state, in_flight=flight))


def send_unknown(t: Transition, ev: SendReturned) -> Decision:
    """Possibly sent (the service logged `send_unknown`): held like a sent
    message, then resent if no ack came (UNKNOWN); unless the platform's
    echo of this attempt already proved it took it (then SENT)."""
    flight = _call_over(t, ev)
    if isinstance(flight, Decision):
        return flight
    phase = Phase.SENT if flight.platform_ts_us is not None else Phase.UNKNOWN
    flight = replace(flight, phase=phase, deadline_us=ack_deadline_us(t.policy, ev.at_us), returned_at_us=ev.at_us)
    return done(t, replace(t.state, in_flight=flight))


def sender_at_its_rate(t: Transition, ev: SendReturned) -> Decision:
    """Not sent: its WhatsApp number is at its rate. It waits like a paced
    message (PACED, until `sender_busy_until_us`) and starts again as this
    same attempt; the pair-rate token `start` took is given back."""
    flight = _call_over(t, ev)
    if isinstance(flight, Decision):
        return flight
    assert ev.sender_busy_until_us is not None
    state = t.state
    # Not before the millisecond after the send's: a timer's name holds its attempt and due ms
    # (shared/tasks.py:task_id), and the timer that woke this attempt was due at or before the send
    # began. A wait due within that ms would be armed under the name of the task running now, which
    # Cloud Tasks refuses for about an hour as a duplicate: no wake-up, the room left to the watchdog
    # (`make scale-model`, 2026-11-28: 9 rooms, once a refused send's own ack timer no longer woke them).
    ready = max(ev.sender_busy_until_us, (ev.at_us // 1000 + 1) * 1000)
    log(t, EventType.PACED, flight.message, attempt=flight.attempt,
        reason=f"sender {flight.message.sender or 'default'} at its rate: "
               f"next slot in {(ready - t.now_us) / 1000:.0f} ms")
    interval_ms, burst = t.policy.pace(flight.message.provider)
    if interval_ms:
        tokens = bucket_now(state.pace_tokens, state.pace_at_us, t.now_us, interval_ms, burst)
        state = replace(state, pace_tokens=min(float(burst), tokens + 1.0), pace_at_us=t.now_us)
    return done(t, arm(t, state, replace(flight, phase=Phase.PACED, deadline_us=None, due_at_us=ready)))


def send_refused_for_good(t: Transition, ev: SendReturned) -> Decision:
    """A permanent refusal (the platform's error says a retry cannot
    succeed): the message ends as failed; the room moves on."""
    flight = _call_over(t, ev)
    if isinstance(flight, Decision):
        return flight
    return done(t, end(t, t.state, EventType.FAILED, Trigger.FAILED, ev.cause, error_code=ev.error_code,
                       error_title=ev.error_title, reason="send_refused"))


def send_refused(t: Transition, ev: SendReturned) -> Decision:
    """Provably not sent: BACKOFF until a retry (SEND_RETRY_BASE_MS x
    4^(n-1); 4^n s for a pair rate limit), or dead-lettered once
    MAX_SEND_ATTEMPTS is used up."""
    flight = _call_over(t, ev)
    if isinstance(flight, Decision):
        return flight
    tries = send_tries(flight)
    if tries >= t.policy.max_send_attempts:
        reason = f"send refused {tries} times; last error {ev.error_code}: {ev.error_title}"
        return done(t, give_up(t, t.state, reason, ev.cause))
    delay_ms = 4 ** tries * 1000 if ev.rate_limited else t.policy.send_retry_base_ms * 4 ** (tries - 1)
    retry_at = ev.at_us + delay_ms * 1000
    return done(t, arm(t, t.state, replace(flight, phase=Phase.BACKOFF, deadline_us=retry_at, due_at_us=retry_at)))


def status_sent(t: Transition, ev: StatusUpdate) -> Decision:
    """A `sent` status: the platform accepted the message; it proves no
    delivery (only delivered/read ack): ignored."""
    return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.SENT_STATUS, seq=ev.seq, **_ids(ev))


def _ids(ev: StatusUpdate) -> dict[str, object]:
    return {"attempt": ev.attempt, "status": ev.status, "provider_message_id": ev.provider_message_id}


def _status_target(t: Transition, ev: StatusUpdate) -> InFlight | Decision:
    """The in-flight attempt a status may prove something about, or the
    decision that ignores it: another incarnation, a seq never given, a
    message that is not in flight (or ended as skipped), or a status of
    this attempt from another WhatsApp number than it went out from."""
    ids = _ids(ev)
    if t.state.incarnation and ev.incarnation != t.state.incarnation:
        return ignore(t, EventType.STATUS_UNKNOWN, IgnoreReason.STALE_INCARNATION, seq=ev.seq, **ids)
    if not t.state.incarnation or ev.seq >= t.state.next_seq:
        return ignore(t, EventType.STATUS_UNKNOWN, IgnoreReason.UNKNOWN_DELIVERY, seq=ev.seq, **ids)
    flight = current(t, ev.incarnation, ev.seq)
    if flight is not None and flight.skipped:
        # Ended as skipped; only the baton waits for the send window.
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=f"after_{EventType.SKIPPED}", **ids)
        return done(t, None)
    if flight is None:
        rearm_if_replay(t, ev.idempotency_key)
        outcome = t.state.outcome_of(ev.seq)
        late = ev.status in ACK_STATUSES and outcome == EventType.TIMED_OUT
        reason = IgnoreReason.LATE_ACK if late else IgnoreReason.NOT_IN_FLIGHT if outcome is None \
            else f"after_{outcome}"
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(reason),
            send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000 if late else None, **ids)
        return done(t, None)
    if ev.sender is not None and ev.attempt == flight.attempt and flight.number not in (None, ev.sender):
        # This attempt went out from `flight.number`: a status of it
        # from another number proves nothing about it.
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=f"{IgnoreReason.WRONG_SENDER}: {ev.sender[:20]}",
            **ids)
        return done(t, None)
    return flight


def status_delivered(t: Transition, ev: StatusUpdate) -> Decision:
    """A delivered/read status of any attempt of the in-flight message acks
    it if it meets the provider's ack level (the room moves on); an earlier
    attempt's while a resend is being sent acks it once that send can no
    longer go out (`acked_early`)."""
    flight = _status_target(t, ev)
    if isinstance(flight, Decision):
        return flight
    ids = _ids(ev)
    if not acks(t.policy.ack_level(flight.message.provider), ev.status):
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, seq=ev.seq, **ids)
    if ev.attempt < flight.attempt and flight.phase is Phase.SENDING:
        if flight.acked_early is not None:
            return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.ACKED_WHILE_RESENDING, seq=ev.seq, **ids)
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(IgnoreReason.ACKED_WHILE_RESENDING), **ids)
        window_end = flight.started_at_us + t.policy.send_window_ms * 1000
        return done(t, arm(t, t.state, replace(flight, acked_early=ev.status, due_at_us=window_end)))
    return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key, status=ev.status,
                       provider_message_id=ev.provider_message_id,
                       send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000))


def status_failed(t: Transition, ev: StatusUpdate) -> Decision:
    """A failed status of the in-flight attempt: the message ends as failed,
    the room moves on; an older attempt's failure proves nothing."""
    flight = _status_target(t, ev)
    if isinstance(flight, Decision):
        return flight
    if ev.attempt != flight.attempt:
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.FAILED_FOR_OLDER_ATTEMPT, seq=ev.seq, **_ids(ev))
    return done(t, end(t, t.state, EventType.FAILED, Trigger.FAILED, ev.idempotency_key, status=ev.status,
                       provider_message_id=ev.provider_message_id, error_code=ev.error_code,
                       error_title=ev.error_title))


def status_other(t: Transition, ev: StatusUpdate) -> Decision:
    """A status baton does not know (neither sent, delivered, read nor
    failed): it proves nothing; ignored."""
    flight = _status_target(t, ev)
    if isinstance(flight, Decision):
        return flight
    return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.UNKNOWN_STATUS, seq=ev.seq, **_ids(ev))
