"""Preparation rules: which messages are prepared (the window behind the
head), their results and failures, and the head waiting for its own.

Decides preparation only; must not send or end a message except by the
PREPARE_POISON rule.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import (
    Transition,
    cancel_pending_timer,
    log,
    put,
    wait_until,
)
from shared.room.effects import Decision, Prepare
from shared.room.inputs import (
    Prepared,
    PrepareFailed,
)
from shared.room.state import (
    PREPARE_PARK_REASON,
    IgnoreReason,
    Phase,
    QueuedMessage,
    RoomState,
    Trigger,
)
from shared.room.transition import advance, done, ignore, start


def prepared(t: Transition, ev: Prepared) -> Decision:
    """A preparation's result: stored with its message (the first result
    wins). The head waiting for it (PREPARING) starts at once, unless the
    room is paused (it then goes back to the head of the queue)."""
    ids = {"seq": ev.seq, "attempt": ev.attempt}
    found = t.state.message(ev.seq) if ev.incarnation == t.state.incarnation else None
    if found is None:
        return ignore(t, EventType.PREPARE_IGNORED, IgnoreReason.NOT_IN_ROOM, **ids)
    msg, index = found
    if msg.prepared is not None or msg.prepare is None:
        return ignore(t, EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
    result = replace(msg, prepared=ev.media_id, prep_failed=None)
    if result.parked is not None and result.parked.startswith(PREPARE_PARK_REASON):
        result = replace(result, parked=None)  # parked for want of this result: it has come
    log(t, EventType.PREPARED, result, attempt=ev.attempt, provider_message_id=ev.media_id,
        reason=f"attempt {ev.attempt} took {ev.took_ms:.0f} ms")
    state = put(t, t.state, result, index)
    flight = state.in_flight
    if index is None:
        assert flight is not None
        if flight.phase is not Phase.PREPARING:
            return done(t, state)
        cancel_pending_timer(t, state, flight)
        if state.paused is not None:
            return done(t, replace(state, in_flight=None, pending=(result, *state.pending)))
        return done(t, start(t, replace(state, in_flight=None), result, flight.attempt, Trigger.PREPARED,
                             ev.idempotency_key))
    if flight is None and index == 0 and msg.parked is not None and result.parked is None:
        state = advance(t, state, Trigger.PREPARED, ev.idempotency_key)
    return done(t, state)


def prepare_failed(t: Transition, ev: PrepareFailed) -> Decision:
    """A failed preparation attempt: retried after PREPARE_RETRY_BASE_MS x
    4^(n-1), until MAX_PREPARE_ATTEMPTS (or at once, for a permanent
    failure) the preparation is given up and PREPARE_POISON applies."""
    ids = {"seq": ev.seq, "attempt": ev.attempt}
    found = t.state.message(ev.seq) if ev.incarnation == t.state.incarnation else None
    if found is None:
        return ignore(t, EventType.PREPARE_IGNORED, IgnoreReason.NOT_IN_ROOM, **ids)
    msg, index = found
    if not msg.needs_preparation or msg.prep_failed is not None:
        return ignore(t, EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
    if ev.attempt != msg.prep_attempt:
        return ignore(t, EventType.PREPARE_IGNORED, IgnoreReason.STALE_PREPARE_ATTEMPT, **ids)
    return done(t, fail_preparation(t, msg, index, ev.error, ev.permanent, ev.idempotency_key))


def fail_preparation(t: Transition, msg: QueuedMessage, index: int | None, error: str, permanent: bool,
                       cause: str) -> RoomState:
    """Attempt `msg.prep_attempt` of `msg`'s preparation failed (or never
    answered): ask again after a backoff, or give the preparation up."""
    state = t.state
    attempt = msg.prep_attempt
    tries = attempt - msg.prep_floor  # since its (re)entry: what MAX_PREPARE_ATTEMPTS bounds
    if permanent or tries >= t.policy.max_prepare_attempts:
        why = f"{error} (attempt {attempt}{', permanent' if permanent else ''})"
        log(t, EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
            reason="given up: " + ("permanent" if permanent else f"MAX_PREPARE_ATTEMPTS={tries}"))
        return give_up_preparation(t, state, msg, index, why, cause)
    delay_ms = t.policy.prepare_retry_base_ms * 4 ** (tries - 1)
    retry_at = t.now_us + delay_ms * 1000
    log(t, EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
        reason=f"retry as attempt {attempt + 1} in {delay_ms} ms")
    again = replace(msg, prep_attempt=attempt + 1)
    t.effects.append(Prepare(state.room_id, state.incarnation, msg.seq, attempt + 1, retry_at))
    state = put(t, state, again, index)
    flight = state.in_flight
    if index is None and flight is not None and flight.phase is Phase.PREPARING:
        wake = max(flight.due_at_us, retry_at + t.policy.prepare_timeout_ms * 1000)
        state = wait_until(t, state, flight, wake)
    return state


def give_up_preparation(t: Transition, state: RoomState, msg: QueuedMessage, index: int | None, why: str,
                        cause: str) -> RoomState:
    """PREPARE_POISON for a message whose preparation was given up: `park`
    parks it at once (it blocks its room when it reaches the head);
    `dead_letter` ends it when it reaches the head (at once if it is the
    head), so messages still end in their order."""
    failed = replace(msg, prep_failed=why[:500])
    if index is not None:
        if t.policy.prepare_poison == "park":
            failed = replace(failed, parked=f"{PREPARE_PARK_REASON}: {why}"[:500])
            log(t, EventType.PARKED, failed, reason=failed.parked)
        return put(t, state, failed, index)
    flight = state.in_flight
    assert flight is not None
    cancel_pending_timer(t, state, flight)
    state = replace(state, in_flight=None, pending=(failed, *state.pending))
    if state.paused is not None:
        return state
    return advance(t, state, Trigger.DEAD_LETTERED, cause)
