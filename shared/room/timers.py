"""Timer rules: the in-flight attempt's wake-up (its timer or the watchdog
sweep) acts if its wait is over, by phase, or waits for the rest; the
sequence gap's wake-up is entry.py's.

Decides when a waiting attempt is sent again, ends or keeps waiting; must
not touch send outcomes or statuses (flight.py).
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import (
    Transition,
    current,
    log,
    wait_until,
)
from shared.room.effects import Decision
from shared.room.entry import gap_timer, give_up_gap
from shared.room.inputs import (
    TimerFired,
    WatchdogSweep,
)
from shared.room.preparation import preparation_failed
from shared.room.state import (
    IgnoreReason,
    InFlight,
    Phase,
    RoomState,
    Trigger,
)
from shared.room.transition import done, end, ignore, rearm_if_replay, release, resend, start


def timer(t: Transition, ev: TimerFired) -> Decision:
    if ev.seq == 0:
        return gap_timer(t, ev)
    flight = current(t, ev.incarnation, ev.seq, ev.attempt)
    if flight is None:
        rearm_if_replay(t, ev.idempotency_key)
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_IN_FLIGHT, seq=ev.seq, attempt=ev.attempt)
    if ev.due_at_us < flight.due_at_us:
        # An earlier timer of this attempt; the later one is armed.
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.SUPERSEDED_TIMER, seq=ev.seq,
                           attempt=ev.attempt)
    return done(t, wake(t, flight, ev.idempotency_key))


def wake(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """The in-flight attempt's wake-up came: act if its wait is over, else
    wait (a new timer) for the rest."""
    state = t.state
    if flight.phase is Phase.PREPARING:
        if t.now_us < flight.due_at_us:
            return wait_until(t, state, flight, flight.due_at_us)
        # No result within PREPARE_TIMEOUT_MS: the task was lost or is stuck.
        return preparation_failed(t, flight.message, None,
                                       f"no preparation result within {t.policy.prepare_timeout_ms} ms",
                                       False, cause)
    if flight.phase is Phase.PACED:
        if t.now_us < flight.due_at_us:
            return wait_until(t, state, flight, flight.due_at_us)
        if state.paused is not None:
            # Not sent yet: back to the head of the queue until the resume,
            # where it starts as this same attempt (its number was never sent).
            waiting = replace(flight.message, attempts=flight.attempt - 1)
            return replace(state, in_flight=None, pending=(waiting, *state.pending))
        return start(t, replace(state, in_flight=None), flight.message, flight.attempt, Trigger.PACED, cause)
    if flight.acked_early is not None or flight.skipped:
        window_end = flight.started_at_us + t.policy.send_window_ms * 1000
        if flight.phase is Phase.SENDING and t.now_us < window_end:
            return wait_until(t, state, flight, window_end)
        if flight.skipped:
            return release(t, state, Trigger.SKIPPED, cause)
        return end(t, state, EventType.ACKED, Trigger.ACK, cause, status=flight.acked_early)
    if flight.phase is Phase.SENDING:
        # No outcome recorded. A send of this attempt, if one was made,
        # returned by `started + send window`; hold the ack timeout after that.
        hold_until = flight.started_at_us + (t.policy.send_window_ms + t.policy.ack_timeout_ms) * 1000
        if t.now_us < hold_until:
            return wait_until(t, state, flight, hold_until)
        if flight.platform_ts_us is not None:
            # The platform's own record (an echo, a WhatsApp `sent`) shows
            # it took this attempt: held long enough, it times out.
            return end(t, state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause,
                            reason="no send outcome was recorded; the platform's own record shows it took it")
        log(t, EventType.SEND_UNKNOWN, flight.message, attempt=flight.attempt,
                 reason="no send outcome was recorded (crash or lost write): counted as possibly sent")
        return resend(t, state, Trigger.RESEND, "send outcome never recorded", cause)
    assert flight.deadline_us is not None
    if t.now_us < flight.deadline_us:
        return wait_until(t, state, flight, flight.deadline_us)
    if flight.phase is Phase.SENT:
        return end(t, state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause)
    if flight.phase is Phase.UNKNOWN:
        return resend(t, state, Trigger.RESEND, "send outcome unknown and no ack by the deadline", cause)
    return resend(t, state, Trigger.RETRY, "retry after a refused send", cause)


def overdue_ms(t: Transition, due_us: int) -> int:
    """How long after `due_us` (a wake-up, epoch us) the sweep came, in whole ms."""
    return (t.now_us - due_us) // 1000


def sweep(t: Transition, ev: WatchdogSweep) -> Decision:
    flight = t.state.in_flight
    grace_us = t.policy.watchdog_grace_ms * 1000
    gap_due = t.state.gap_due_us
    # The reason says how late the room's own wake-up was (the report's
    # "how overdue the rooms were"): "{phase}, overdue {ms} ms".
    if t.state.held and gap_due is not None and gap_due + grace_us <= t.now_us:
        log(t, EventType.WATCHDOG_RESCUED, None, reason=f"sequence gap, overdue {overdue_ms(t, gap_due)} ms")
        state = give_up_gap(t, t.state, ev.idempotency_key)
        if flight is None or state.in_flight is not flight or flight.due_at_us + grace_us > t.now_us:
            return done(t, state)
        # The in-flight wake-up is overdue too (both tasks lost): woken
        # in this same sweep, not left for the next one.
        t.state = state
    elif flight is None or flight.due_at_us + grace_us > t.now_us:
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_OVERDUE)
    log(t, EventType.WATCHDOG_RESCUED, flight.message, attempt=flight.attempt,
             reason=f"{flight.phase}, overdue {overdue_ms(t, flight.due_at_us)} ms")
    return done(t, wake(t, flight, ev.idempotency_key))
