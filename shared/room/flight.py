"""Flight rules: the in-flight attempt's send outcome, platform statuses
naming it, its timers and the watchdog (receipts by recipient: receipts.py).

Decides when the message holding the baton ends or is sent again; must not
touch how messages enter (entry.py) or operator actions.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.effects import Decision
from shared.room.inputs import (
    SendReturned,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
)
from shared.room.pacing import bucket_now
from shared.room.receipts import kept_watermark_acks
from shared.room.state import (
    ACK_STATUSES,
    IgnoreReason,
    InFlight,
    Phase,
    RoomState,
    SendOutcome,
    Trigger,
    ack_deadline_us,
    acks,
)
from shared.room.transition import TransitionCore


class FlightRules(TransitionCore):
    """What happens to the message holding the baton."""

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
            if kept_watermark_acks(flight):
                # A watermark that came before this return and before the echo
                # covers the echo's stamp, known now.
                return self.done(self.end(state, EventType.ACKED, Trigger.ACK, ev.cause,
                                          status=flight.early_watermark_status,
                                          provider_message_id=ev.provider_message_id or flight.provider_message_id,
                                          send_to_ack_ms=(ev.at_us - flight.started_at_us) / 1000))
            # The message is held ack_timeout from now. The timer armed at the
            # start stays; if it comes earlier it arms another for the rest.
            deadline = ack_deadline_us(self.policy, ev.at_us)
            flight = replace(flight, phase=Phase.SENT, deadline_us=deadline)
            if ev.provider_message_id is not None:
                # Recorded by a transaction (not the blind-written acceptance):
                # what a receipt by recipient is matched against. A kept
                # watermark stays until the echo's stamp comes.
                flight = replace(flight, provider_message_id=ev.provider_message_id, returned_at_us=ev.at_us,
                                 early_mids=(), early_mids_status=None)
            return self.done(replace(state, in_flight=flight))
        if ev.outcome is SendOutcome.UNKNOWN:
            # Possibly sent (the service logged `send_unknown`): held like a
            # sent message, then resent if no ack came; unless the platform's
            # echo of this attempt already proved it took it (then SENT).
            deadline = ack_deadline_us(self.policy, ev.at_us)
            phase = Phase.SENT if flight.platform_ts_us is not None else Phase.UNKNOWN
            return self.done(replace(state, in_flight=replace(flight, phase=phase, deadline_us=deadline,
                                                              returned_at_us=ev.at_us)))
        if ev.sender_busy_until_us is not None:
            # Not sent: its number is at its rate. It waits like a paced
            # message and starts again as this same attempt.
            ready = max(ev.sender_busy_until_us, ev.at_us)
            self.log(EventType.PACED, flight.message, attempt=flight.attempt,
                     reason=f"sender {flight.message.sender or 'default'} at its rate: "
                            f"next slot in {(ready - self.now_us) / 1000:.0f} ms")
            interval_ms, burst = self.policy.pace(flight.message.provider)
            if interval_ms:
                # The pair-rate token `start` took was not used: give it back.
                tokens = bucket_now(state.pace_tokens, state.pace_at_us, self.now_us, interval_ms, burst)
                state = replace(state, pace_tokens=min(float(burst), tokens + 1.0), pace_at_us=self.now_us)
            return self.done(self.arm(state, replace(flight, phase=Phase.PACED, deadline_us=None,
                                                     due_at_us=ready)))
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
        if ev.sender is not None and ev.attempt == flight.attempt and flight.number not in (None, ev.sender):
            # This attempt went out from `flight.number`: a status of it
            # from another number proves nothing about it.
            self.log(EventType.STATUS_IGNORED, None, seq=ev.seq,
                     reason=f"{IgnoreReason.WRONG_SENDER}: {ev.sender[:20]}", **ids)
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
            if flight.platform_ts_us is not None:
                # The platform's own record (an echo, a WhatsApp `sent`) shows
                # it took this attempt: held long enough, it times out.
                return self.end(state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause,
                                reason="no send outcome was recorded; the platform's own record shows it took it")
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

    def overdue_ms(self, due_us: int) -> int:
        """How long after `due_us` (a wake-up, epoch us) the sweep came, in whole ms."""
        return (self.now_us - due_us) // 1000

    def sweep(self, ev: WatchdogSweep) -> Decision:
        flight = self.state.in_flight
        grace_us = self.policy.watchdog_grace_ms * 1000
        gap_due = self.state.gap_due_us
        # The reason says how late the room's own wake-up was (the report's
        # "how overdue the rooms were"): "{phase}, overdue {ms} ms".
        if self.state.held and gap_due is not None and gap_due + grace_us <= self.now_us:
            self.log(EventType.WATCHDOG_RESCUED, None, reason=f"sequence gap, overdue {self.overdue_ms(gap_due)} ms")
            state = self.give_up_gap(self.state, ev.idempotency_key)
            if flight is None or state.in_flight is not flight or flight.due_at_us + grace_us > self.now_us:
                return self.done(state)
            # The in-flight wake-up is overdue too (both tasks lost): woken
            # in this same sweep, not left for the next one.
            self.state = state
        elif flight is None or flight.due_at_us + grace_us > self.now_us:
            return self.ignore(EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_OVERDUE)
        self.log(EventType.WATCHDOG_RESCUED, flight.message, attempt=flight.attempt,
                 reason=f"{flight.phase}, overdue {self.overdue_ms(flight.due_at_us)} ms")
        return self.done(self.wake(flight, ev.idempotency_key))
