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
from shared.room.entry import give_up_gap
from shared.room.facts import accepted
from shared.room.inputs import (
    TimerFired,
    WatchdogSweep,
)
from shared.room.preparation import fail_preparation
from shared.room.state import (
    IgnoreReason,
    InFlight,
    Phase,
    RoomState,
    Trigger,
)
from shared.room.transition import done, end, ignore, rearm_if_replay, release, resend, start


def _due(t: Transition, ev: TimerFired) -> InFlight | Decision:
    """The in-flight attempt a timer wakes, or the decision that ignores
    the timer: not the attempt in flight, or an earlier timer of it (the
    later one is armed)."""
    flight = current(t, ev.incarnation, ev.seq, ev.attempt)
    if flight is None:
        rearm_if_replay(t, ev.idempotency_key)
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.NOT_IN_FLIGHT, seq=ev.seq, attempt=ev.attempt)
    if ev.due_at_us < flight.due_at_us:
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.SUPERSEDED_TIMER, seq=ev.seq, attempt=ev.attempt)
    return flight


def timer_not_in_flight(t: Transition, ev: TimerFired) -> Decision:
    """A timer while nothing is in flight: late or duplicate, ignored."""
    flight = _due(t, ev)
    assert isinstance(flight, Decision), "a room with nothing in flight has no attempt to wake"
    return flight


def timer_sending(t: Transition, ev: TimerFired) -> Decision:
    """The timer of an attempt being sent (`wake_sending`). A timer that
    carries its attempt's acceptance (`TimerFired.accepted_deadline_us`:
    the service saw the send accepted before arming it) first makes the
    attempt SENT, held to that deadline, as a recorded acceptance does
    (facts.py, `accepted`), then wakes it as SENT (`wake_sent`). An earlier
    timer of the attempt (another decision re-armed it: an earlier
    attempt's ack, a skip) still records the acceptance, and is otherwise
    ignored: the later timer carries none, and would find the attempt
    SENDING (resent as possibly sent at its hold time)."""
    state = None if ev.accepted_deadline_us is None else \
        accepted(t, ev.incarnation, ev.seq, ev.attempt, ev.accepted_deadline_us)
    if state is None:
        flight = _due(t, ev)
        return flight if isinstance(flight, Decision) else done(t, wake_sending(t, flight, ev.idempotency_key))
    t.state = state
    flight = _due(t, ev)
    if isinstance(flight, Decision):  # superseded: ignored, its acceptance kept
        return done(t, state)
    return done(t, wake_sent(t, flight, ev.idempotency_key))


def timer_sent(t: Transition, ev: TimerFired) -> Decision:
    """The timer of an accepted attempt (`wake_sent`)."""
    flight = _due(t, ev)
    return flight if isinstance(flight, Decision) else done(t, wake_sent(t, flight, ev.idempotency_key))


def timer_unknown(t: Transition, ev: TimerFired) -> Decision:
    """The timer of an attempt whose outcome is unknown (`wake_unknown`)."""
    flight = _due(t, ev)
    return flight if isinstance(flight, Decision) else done(t, wake_unknown(t, flight, ev.idempotency_key))


def timer_backoff(t: Transition, ev: TimerFired) -> Decision:
    """The retry timer of a refused attempt (`wake_backoff`)."""
    flight = _due(t, ev)
    return flight if isinstance(flight, Decision) else done(t, wake_backoff(t, flight, ev.idempotency_key))


def timer_paced(t: Transition, ev: TimerFired) -> Decision:
    """The timer of a paced attempt, due when its token is whole (`wake_paced`)."""
    flight = _due(t, ev)
    return flight if isinstance(flight, Decision) else done(t, wake_paced(t, flight, ev.idempotency_key))


def timer_preparing(t: Transition, ev: TimerFired) -> Decision:
    """The timer of a head waiting for its preparation (`wake_preparing`)."""
    flight = _due(t, ev)
    return flight if isinstance(flight, Decision) else done(t, wake_preparing(t, flight, ev.idempotency_key))


def wake_preparing(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """Before PREPARE_TIMEOUT_MS: wait for the rest. After it, no result
    came (the task was lost or is stuck): the preparation failed."""
    if t.now_us < flight.due_at_us:
        return wait_until(t, t.state, flight, flight.due_at_us)
    return fail_preparation(t, flight.message, None,
                              f"no preparation result within {t.policy.prepare_timeout_ms} ms", False, cause)


def wake_paced(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """The pair-rate token is whole: send as this same attempt; early: wait
    for the rest; paused meanwhile: back to the head of the queue until the
    resume (it starts as this same attempt: its number was never sent)."""
    state = t.state
    if t.now_us < flight.due_at_us:
        return wait_until(t, state, flight, flight.due_at_us)
    if state.paused is not None:
        waiting = replace(flight.message, attempts=flight.attempt - 1)
        return replace(state, in_flight=None, pending=(waiting, *state.pending))
    return start(t, replace(state, in_flight=None), flight.message, flight.attempt, Trigger.PACED, cause)


def _settled(t: Transition, flight: InFlight, cause: str) -> RoomState | None:
    """An attempt that already ended (skipped) or was acked early passes the
    baton once its send can no longer go out (the send window's end), or
    None if it has not ended."""
    if flight.acked_early is None and not flight.skipped:
        return None
    window_end = flight.started_at_us + t.policy.send_window_ms * 1000
    if flight.phase is Phase.SENDING and t.now_us < window_end:
        return wait_until(t, t.state, flight, window_end)
    if flight.skipped:
        return release(t, t.state, Trigger.SKIPPED, cause)
    return end(t, t.state, EventType.ACKED, Trigger.ACK, cause, status=flight.acked_early)


def wake_sending(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """No outcome recorded. A send of this attempt, if one was made,
    returned by `started + send window`; it is held the ack timeout after
    that, then times out if the platform's own record shows it took it,
    else is resent as possibly sent."""
    settled = _settled(t, flight, cause)
    if settled is not None:
        return settled
    hold_until = flight.started_at_us + (t.policy.send_window_ms + t.policy.ack_timeout_ms) * 1000
    if t.now_us < hold_until:
        return wait_until(t, t.state, flight, hold_until)
    if flight.platform_ts_us is not None:
        return end(t, t.state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause,
                   reason="no send outcome was recorded; the platform's own record shows it took it")
    log(t, EventType.SEND_UNKNOWN, flight.message, attempt=flight.attempt,
        reason="no send outcome was recorded (crash or lost write): counted as possibly sent")
    return resend(t, t.state, Trigger.RESEND, "send outcome never recorded", cause)


def _before_deadline(t: Transition, flight: InFlight, cause: str) -> RoomState | None:
    """Settled (`_settled`), or still before its deadline (a new timer for
    the rest), or None: the deadline has passed."""
    settled = _settled(t, flight, cause)
    if settled is not None:
        return settled
    assert flight.deadline_us is not None
    return wait_until(t, t.state, flight, flight.deadline_us) if t.now_us < flight.deadline_us else None


def wake_sent(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """No ack by the ack deadline: the message ends as timed out."""
    waiting = _before_deadline(t, flight, cause)
    return waiting if waiting is not None else end(t, t.state, EventType.TIMED_OUT, Trigger.TIMED_OUT, cause)


def wake_unknown(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """Possibly sent and no ack by the deadline: resent as the next attempt."""
    waiting = _before_deadline(t, flight, cause)
    return waiting if waiting is not None else resend(
        t, t.state, Trigger.RESEND, "send outcome unknown and no ack by the deadline", cause)


def wake_backoff(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """The retry time of a refused send: resent as the next attempt."""
    waiting = _before_deadline(t, flight, cause)
    return waiting if waiting is not None else resend(t, t.state, Trigger.RETRY, "retry after a refused send", cause)


_WAKE = {Phase.SENDING: wake_sending, Phase.SENT: wake_sent, Phase.UNKNOWN: wake_unknown,
         Phase.BACKOFF: wake_backoff, Phase.PACED: wake_paced, Phase.PREPARING: wake_preparing}


def wake(t: Transition, flight: InFlight, cause: str) -> RoomState:
    """The in-flight attempt's wake-up came (its timer, or the watchdog):
    the wake-up of its phase acts if its wait is over, else waits (a new
    timer) for the rest."""
    return _WAKE[flight.phase](t, flight, cause)


def overdue_ms(t: Transition, due_us: int) -> int:
    """How long after `due_us` (a wake-up, epoch us) the sweep came, in whole ms."""
    return (t.now_us - due_us) // 1000


def sweep(t: Transition, ev: WatchdogSweep) -> Decision:
    """The watchdog: a sequence gap overdue by WATCHDOG_GRACE_MS is given up
    as its gap timer would; an in-flight wake-up overdue by it is woken
    (`wake`), in the same sweep if both are; otherwise nothing."""
    flight = t.state.in_flight
    grace_us = t.policy.watchdog_grace_ms * 1000
    gap_due = t.state.gap_due_us
    # The reason says how late the room's own wake-up was (the report's
    # "how overdue the rooms were"): "{phase}, overdue {ms} ms".
    if t.state.sequence_held and gap_due is not None and gap_due + grace_us <= t.now_us:
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
