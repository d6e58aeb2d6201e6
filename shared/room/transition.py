"""The baton's primitives every rule uses: start a message, advance the
baton, end a message, send again or give up, and build the decision.

Pure: effects and log lines are data until the service runs them after the
commit. Must not hold any rule of its own concern (those are in entry,
flight, timers, receipts, preparation and operator_actions).
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType, utc_iso
from shared.providers.registry import has_numbers
from shared.room.context import Transition, arm, cancel_pending_timer, log, record_end, send_tries
from shared.room.effects import Decision, KeepDeadLetter, Prepare, ScheduleTimer, Send
from shared.room.ids import make_delivery_id
from shared.room.pacing import bucket_now, token_ready_at_us
from shared.room.state import IgnoreReason, InFlight, Phase, QueuedMessage, RoomState, Trigger
from shared.room.window import poison, preparation_window, request_preparations, wait_for_preparation
from shared.senders import sent_from


def done(t: Transition, state: RoomState | None, refused: str | None = None) -> Decision:
    if state is not None:
        state = request_preparations(t, state)
    asked: set[tuple[int, int]] = set()
    effects = []
    for effect in t.effects:  # one request per preparation attempt, however many rules asked
        if isinstance(effect, Prepare):
            if (effect.seq, effect.attempt) in asked:
                continue
            asked.add((effect.seq, effect.attempt))
        effects.append(effect)
    return Decision(state, tuple(effects), tuple(t.events), refused, tuple(t.dead_letters))


def ignore(t: Transition, event: EventType, reason: IgnoreReason, **fields: object) -> Decision:
    """Log an event that changes nothing, keeping the current state."""
    log(t, event, reason=str(reason), **fields)
    return done(t, None)


def start(t: Transition, state: RoomState, msg: QueuedMessage, attempt: int, trigger: Trigger, cause: str) -> RoomState:
    """Give `msg` the baton as `attempt`: arm its first timer, then send it;
    or, when the room's pair-rate bucket has no token, wait for one
    (PACED, a timer due when it comes) without sending."""
    interval_ms, burst = t.policy.pace(msg.provider)
    if interval_ms:
        tokens = bucket_now(state.pace_tokens, state.pace_at_us, t.now_us, interval_ms, burst)
        if tokens < 1.0:
            ready = token_ready_at_us(tokens, t.now_us, interval_ms)
            log(t, EventType.PACED, msg, attempt=attempt,
                reason=f"pair rate: next token in {(ready - t.now_us) / 1000:.0f} ms")
            state = replace(state, pace_tokens=tokens, pace_at_us=t.now_us)
            return arm(t, state, InFlight(msg, attempt, t.now_us, Phase.PACED, ready, cause))
        state = replace(state, pace_tokens=tokens - 1.0, pace_at_us=t.now_us)
    due = t.now_us + (t.policy.ack_timeout_ms + t.policy.first_timer_slack_ms) * 1000
    number = sent_from(msg.sender, t.policy.whatsapp_numbers) if has_numbers(msg.provider) else None
    flight = InFlight(msg, attempt, t.now_us, Phase.SENDING, due, cause, number=number)
    state = arm(t, state, flight)
    t.effects.append(Send(
        state.room_id, state.incarnation, msg, attempt,
        make_delivery_id(state.room_id, state.incarnation, msg.seq, attempt, t.now_us),
        trigger, t.now_us, t.now_us + t.policy.send_start_deadline_ms * 1000, cause, number))
    return state


def advance(t: Transition, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
    """With nothing in flight, start the head of the queue unless it is parked."""
    assert state.in_flight is None
    if not state.pending or state.paused is not None:
        return state  # paused: the pause was logged; nothing starts until the resume
    while state.pending and state.pending[0].prep_failed is not None and not state.pending[0].parked:
        state = poison(t, state, state.pending[0])
    if not state.pending:
        return state
    head = state.pending[0]
    if head.parked:
        log(t, EventType.BLOCKED, head, reason=head.parked)
        return state
    state = replace(state, pending=state.pending[1:])
    if head.needs_preparation:
        return wait_for_preparation(t, state, head, cause)
    return start(t, state, head, head.next_attempt, trigger, cause)


def end(t: Transition, state: RoomState, outcome: EventType, trigger: Trigger, cause: str, **fields: object) -> RoomState:
    """End the in-flight message as `outcome` and pass the baton to the head
    of the queue, if any (same transaction: no lost wake-up)."""
    flight = state.in_flight
    assert flight is not None
    # What its outcome message tells (shared/outcomes.py): the platform's id, the publish time.
    fields.setdefault("provider_message_id", flight.provider_message_id)
    fields.setdefault("published_at", utc_iso(flight.message.published_at_us))
    log(t, outcome, flight.message, attempt=flight.attempt, **fields)
    cancel_pending_timer(t, state, flight)
    state = replace(record_end(t, state, flight.message, outcome, flight.attempt), in_flight=None)
    return advance(t, state, trigger, cause)


def release(t: Transition, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
    """Pass the baton of an in-flight message that has already ended
    (skipped while its send could still go out) to the head of the queue."""
    assert state.in_flight is not None
    cancel_pending_timer(t, state, state.in_flight)
    return advance(t, replace(state, in_flight=None), trigger, cause)


def give_up(t: Transition, state: RoomState, reason: str, cause: str) -> RoomState:
    flight = state.in_flight
    assert flight is not None
    t.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation,
                                         replace(flight.message, attempts=flight.attempt), flight.attempt,
                                         reason))
    return end(t, state, EventType.DEAD_LETTERED, Trigger.DEAD_LETTERED, cause, reason=reason)


def resend(t: Transition, state: RoomState, trigger: Trigger, reason: str, cause: str) -> RoomState:
    """Send the in-flight message again as the next attempt, or dead-letter
    it once `max_send_attempts` is used up."""
    flight = state.in_flight
    assert flight is not None
    tries = send_tries(flight)
    if tries >= t.policy.max_send_attempts:
        return give_up(t, state, f"no confirmed send after {tries} attempts; last: {reason}", cause)
    log(t, EventType.RESENT, flight.message, attempt=flight.attempt + 1, trigger=str(trigger), reason=reason)
    return start(t, state, flight.message, flight.attempt + 1, trigger, cause)


def rearm_if_replay(t: Transition, key: str) -> None:
    """A redelivered request that started the in-flight attempt re-arms its
    timer and asks again for the preparations of the window it slid (same
    task names, so idempotent on the real service): its first delivery
    may have died after the commit and before they were made."""
    flight = t.state.in_flight
    if flight is not None and flight.idempotency_key == key:
        t.effects.append(ScheduleTimer(t.state.room_id, t.state.incarnation, flight.message.seq,
                                       flight.attempt, flight.due_at_us))
        # The same request slid the preparation window: the prepare tasks it
        # asked for may not have been made either (same names: idempotent).
        for m in preparation_window(t, t.state):
            if m.needs_preparation and m.preparation_asked and m.prep_failed is None and not m.parked:
                t.effects.append(Prepare(t.state.room_id, t.state.incarnation, m.seq, m.prep_attempt,
                                         t.now_us))
