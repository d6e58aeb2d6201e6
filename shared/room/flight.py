"""Flight rules: the in-flight attempt's send outcome, platform statuses
naming it (its timers and the watchdog: timers.py; receipts by recipient:
receipts.py).

Decides when the message holding the baton ends or is sent again; must not
touch how messages enter (entry.py) or operator actions.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import (
    Transition,
    arm,
    current,
    log,
    send_tries,
)
from shared.room.effects import Decision
from shared.room.inputs import (
    SendReturned,
    StatusUpdate,
)
from shared.room.pacing import bucket_now
from shared.room.receipts import kept_watermark_acks
from shared.room.state import (
    ACK_STATUSES,
    IgnoreReason,
    Phase,
    SendOutcome,
    Trigger,
    ack_deadline_us,
    acks,
)
from shared.room.transition import done, end, give_up, ignore, rearm_if_replay, release


def send_returned(t: Transition, ev: SendReturned) -> Decision:
    flight = current(t, ev.incarnation, ev.seq, ev.attempt)
    if flight is None or flight.phase is not Phase.SENDING:
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.STALE_SEND_OUTCOME, seq=ev.seq,
                           attempt=ev.attempt, status=str(ev.outcome))
    state = t.state
    if flight.skipped:
        # Skipped while this call was under way; it is over now.
        return done(t, release(t, state, Trigger.SKIPPED, ev.cause))
    if flight.acked_early is not None:
        # An earlier attempt was acked meanwhile; this call is over now.
        return done(t, end(t, state, EventType.ACKED, Trigger.ACK, ev.cause, status=flight.acked_early))
    if ev.outcome is SendOutcome.ACCEPTED:
        level = t.policy.ack_level(flight.message.provider)
        if level == "accepted":
            return done(t, end(t, state, EventType.ACKED, Trigger.ACK, ev.cause, status="accepted",
                                      provider_message_id=ev.provider_message_id,
                                      send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
        if ev.provider_message_id is not None and ev.provider_message_id in flight.early_mids \
                and flight.early_mids_status is not None and acks(level, flight.early_mids_status):
            # A receipt named this message before its send call returned.
            return done(t, end(t, state, EventType.ACKED, Trigger.ACK, ev.cause,
                                      status=flight.early_mids_status, provider_message_id=ev.provider_message_id,
                                      send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
        if kept_watermark_acks(flight):
            # A watermark that came before this return and before the echo
            # covers the echo's stamp, known now.
            return done(t, end(t, state, EventType.ACKED, Trigger.ACK, ev.cause,
                                      status=flight.early_watermark_status,
                                      provider_message_id=ev.provider_message_id or flight.provider_message_id,
                                      send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
        # The message is held ack_timeout from now. The timer armed at the
        # start stays; if it comes earlier it arms another for the rest.
        deadline = ack_deadline_us(t.policy, ev.at_us)
        flight = replace(flight, phase=Phase.SENT, deadline_us=deadline)
        if ev.provider_message_id is not None:
            # Recorded by a transaction (not the blind-written acceptance):
            # what a receipt by recipient is matched against. A kept
            # watermark stays until the echo's stamp comes.
            flight = replace(flight, provider_message_id=ev.provider_message_id, returned_at_us=ev.at_us,
                             early_mids=(), early_mids_status=None)
        return done(t, replace(state, in_flight=flight))
    if ev.outcome is SendOutcome.UNKNOWN:
        # Possibly sent (the service logged `send_unknown`): held like a
        # sent message, then resent if no ack came; unless the platform's
        # echo of this attempt already proved it took it (then SENT).
        deadline = ack_deadline_us(t.policy, ev.at_us)
        phase = Phase.SENT if flight.platform_ts_us is not None else Phase.UNKNOWN
        return done(t, replace(state, in_flight=replace(flight, phase=phase, deadline_us=deadline,
                                                          returned_at_us=ev.at_us)))
    if ev.sender_busy_until_us is not None:
        # Not sent: its number is at its rate. It waits like a paced
        # message and starts again as this same attempt.
        ready = max(ev.sender_busy_until_us, ev.at_us)
        log(t, EventType.PACED, flight.message, attempt=flight.attempt,
                 reason=f"sender {flight.message.sender or 'default'} at its rate: "
                        f"next slot in {(ready - t.now_us) / 1000:.0f} ms")
        interval_ms, burst = t.policy.pace(flight.message.provider)
        if interval_ms:
            # The pair-rate token `start` took was not used: give it back.
            tokens = bucket_now(state.pace_tokens, state.pace_at_us, t.now_us, interval_ms, burst)
            state = replace(state, pace_tokens=min(float(burst), tokens + 1.0), pace_at_us=t.now_us)
        return done(t, arm(t, state, replace(flight, phase=Phase.PACED, deadline_us=None,
                                                 due_at_us=ready)))
    if ev.permanent:
        return done(t, end(t, state, EventType.FAILED, Trigger.FAILED, ev.cause, error_code=ev.error_code,
                                  error_title=ev.error_title, reason="send_refused"))
    tries = send_tries(flight)
    if tries >= t.policy.max_send_attempts:
        reason = f"send refused {tries} times; last error {ev.error_code}: {ev.error_title}"
        return done(t, give_up(t, state, reason, ev.cause))
    if ev.rate_limited:
        delay_ms = 4 ** tries * 1000
    else:
        delay_ms = t.policy.send_retry_base_ms * 4 ** (tries - 1)
    retry_at = ev.at_us + delay_ms * 1000
    return done(t, arm(t, state, replace(flight, phase=Phase.BACKOFF, deadline_us=retry_at,
                                             due_at_us=retry_at)))


def status(t: Transition, ev: StatusUpdate) -> Decision:
    ids = {"attempt": ev.attempt, "status": ev.status, "provider_message_id": ev.provider_message_id}
    if ev.status == "sent":
        # The platform accepted the message; only delivered/read ack it.
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.SENT_STATUS, seq=ev.seq, **ids)
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
        if late:
            reason: IgnoreReason | str = IgnoreReason.LATE_ACK
        elif outcome is None:
            reason = IgnoreReason.NOT_IN_FLIGHT
        else:
            reason = f"after_{outcome}"
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(reason),
                 send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000 if late else None, **ids)
        return done(t, None)
    if ev.sender is not None and ev.attempt == flight.attempt and flight.number not in (None, ev.sender):
        # This attempt went out from `flight.number`: a status of it
        # from another number proves nothing about it.
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq,
                 reason=f"{IgnoreReason.WRONG_SENDER}: {ev.sender[:20]}", **ids)
        return done(t, None)
    if ev.status in ACK_STATUSES and not acks(t.policy.ack_level(flight.message.provider), ev.status):
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, seq=ev.seq, **ids)
    if ev.status in ACK_STATUSES and ev.attempt < flight.attempt and flight.phase is Phase.SENDING:
        # An earlier attempt reached the device while this one is being
        # sent: the message is acked, but the baton waits until this
        # attempt's call cannot go out any more.
        if flight.acked_early is not None:
            return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.ACKED_WHILE_RESENDING, seq=ev.seq, **ids)
        log(t, EventType.STATUS_IGNORED, None, seq=ev.seq, reason=str(IgnoreReason.ACKED_WHILE_RESENDING),
                 **ids)
        window_end = flight.started_at_us + t.policy.send_window_ms * 1000
        return done(t, arm(t, t.state, replace(flight, acked_early=ev.status, due_at_us=window_end)))
    if ev.status in ACK_STATUSES:
        # Any attempt of this seq reaching the device acks the message.
        return done(t, end(t, t.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key,
                                  status=ev.status, provider_message_id=ev.provider_message_id,
                                  send_to_ack_ms=(ev.seen_at_us - ev.sent_at_us) / 1000))
    if ev.status == "failed":
        if ev.attempt != flight.attempt:
            return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.FAILED_FOR_OLDER_ATTEMPT, seq=ev.seq, **ids)
        return done(t, end(t, t.state, EventType.FAILED, Trigger.FAILED, ev.idempotency_key,
                                  status=ev.status, provider_message_id=ev.provider_message_id,
                                  error_code=ev.error_code, error_title=ev.error_title))
    return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.UNKNOWN_STATUS, seq=ev.seq, **ids)
