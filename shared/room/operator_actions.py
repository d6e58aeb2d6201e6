"""Operator rules: pause, resume, skip and redrive, each a no-op the second
time.

Decides what an operator's action does to the room; must not touch the
platform's statuses or timers (flight.py).
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import (
    Transition,
    arm,
    log,
    record_end,
    with_incarnation,
)
from shared.room.effects import Decision
from shared.room.inputs import (
    Pause,
    Redrive,
    Resume,
    Skip,
)
from shared.room.state import (
    IgnoreReason,
    Paused,
    Phase,
    QueuedMessage,
    Trigger,
)
from shared.room.transition import advance, done, end, ignore


def redrive(t: Transition, ev: Redrive) -> Decision:
    state = t.state
    fields = {"actor": ev.actor, "reason": ev.reason}
    for i, m in enumerate(state.pending):
        if m.seq == ev.seq and m.parked:
            if m.text is None:
                return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.NO_BODY, seq=ev.seq, actor=ev.actor)
            # Prepared anew if need be, under preparation attempt numbers never used before.
            released = replace(m, parked=None, prep_floor=m.prep_attempt, prep_failed=None,
                               attempt_floor=m.attempts)
            log(t, EventType.REDRIVEN, released, **fields)
            state = replace(state, pending=(*state.pending[:i], released, *state.pending[i + 1:]))
            if state.in_flight is None and i == 0:
                state = advance(t, state, Trigger.REDRIVE, ev.idempotency_key)
            return done(t, state)
    if ev.message is None:
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.NOT_PARKED, seq=ev.seq, actor=ev.actor)
    return redrive_dead_letter(t, ev, ev.message)


def redrive_dead_letter(t: Transition, ev: Redrive, kept: QueuedMessage) -> Decision:
    """A message baton dead-lettered goes back to the head of the queue:
    every queued message came after it. The room's own record of the
    message's last end is what makes a second redrive a no-op."""
    state = t.state
    ids = {"seq": ev.seq, "message_id": kept.message_id, "actor": ev.actor}
    if not state.incarnation or ev.incarnation != state.incarnation:
        # The room was deleted (TTL) and made anew: the message's seq and
        # its record are gone. Publishing it again is the way.
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.STALE_INCARNATION, **ids)
    if kept.message_id in state.message_ids():
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_IN_ROOM, **ids)
    last = next((e for e in reversed(state.ended) if e.message_id == kept.message_id), None)
    if last is None or last.outcome != EventType.DEAD_LETTERED:
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.NOT_DEAD_LETTERED, **ids)
    # Its attempt numbers go on above every one it took (fencing: a late
    # status of an old attempt can never be taken for the new one's); its
    # send count starts again. Prepared anew if it needs it (a media id may
    # have expired meanwhile), under preparation numbers never used before.
    attempts = max(kept.attempts, last.attempts)
    msg = replace(kept, seq=ev.seq, parked=None, enqueued_at_us=t.now_us, prepared=None,
                  prep_floor=kept.prep_attempt, prep_failed=None, attempts=attempts, attempt_floor=attempts)
    log(t, EventType.REDRIVEN, msg, actor=ev.actor, reason=ev.reason)
    # Ahead of every queued message that came after it (all of them, but
    # another dead letter of an earlier seq redriven before it).
    at = next((i for i, m in enumerate(state.pending) if m.seq > msg.seq), len(state.pending))
    state = replace(state, pending=(*state.pending[:at], msg, *state.pending[at:]))
    if state.in_flight is None and at == 0:
        state = advance(t, state, Trigger.REDRIVE, ev.idempotency_key)
    return done(t, state)


def skip(t: Transition, ev: Skip) -> Decision:
    state = t.state
    fields = {"actor": ev.actor, "reason": ev.reason}
    flight = state.in_flight
    if flight is not None and flight.message.seq == ev.seq:
        if flight.skipped or flight.acked_early is not None:
            return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_ENDED, seq=ev.seq, actor=ev.actor)
        window_end = flight.started_at_us + t.policy.send_window_ms * 1000
        if flight.phase is Phase.SENDING and t.now_us < window_end:
            # Its send may still go out: the message ends now, the baton
            # passes once that call cannot go out any more.
            log(t, EventType.SKIPPED, flight.message, attempt=flight.attempt, **fields)
            state = record_end(t, state, flight.message, EventType.SKIPPED)
            return done(t, arm(t, state, replace(flight, skipped=True, due_at_us=window_end)))
        return done(t, end(t, state, EventType.SKIPPED, Trigger.SKIPPED, ev.idempotency_key, **fields))
    for i, m in enumerate(state.pending):
        if m.seq == ev.seq:
            log(t, EventType.SKIPPED, m, **fields)
            state = record_end(t, replace(state, pending=(*state.pending[:i], *state.pending[i + 1:])),
                               m, EventType.SKIPPED)
            if state.in_flight is None and i == 0:
                state = advance(t, state, Trigger.SKIPPED, ev.idempotency_key)
            return done(t, state)
    return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.NOT_IN_ROOM, seq=ev.seq, actor=ev.actor)


def pause(t: Transition, ev: Pause) -> Decision:
    if t.state.paused is not None:
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.ALREADY_PAUSED, actor=ev.actor)
    log(t, EventType.PAUSED, None, actor=ev.actor, reason=ev.reason)
    return done(t, replace(with_incarnation(t), paused=Paused(ev.actor, ev.reason, t.now_us)))


def resume(t: Transition, ev: Resume) -> Decision:
    if t.state.paused is None:
        return ignore(t, EventType.OPERATOR_IGNORED, IgnoreReason.NOT_PAUSED, actor=ev.actor)
    log(t, EventType.RESUMED, None, actor=ev.actor, reason=ev.reason)
    state = replace(t.state, paused=None)
    if state.in_flight is None:
        state = advance(t, state, Trigger.RESUME, ev.idempotency_key)
    return done(t, state)
