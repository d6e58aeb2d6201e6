"""The transition context: one `decide` call being applied (the room before
it, its policy and time, and the effects and log events it accumulates),
and the bookkeeping every rule does on it: log, arm a timer, record an end,
cancel a timer, put a message back, wait, and find the in-flight attempt.

Pure: effects and log lines are data until the service runs them after the
commit. Must not hold any rule (those are in entry, flight, timers,
receipts, preparation and operator_actions) nor pass the baton
(transition.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.room.effects import CancelTimer, Effect, KeepDeadLetter, ScheduleTimer
from shared.room.state import Ended, InFlight, Policy, QueuedMessage, RoomState


@dataclass
class Transition:
    """One `decide` call being applied: `state` (the room as read; a rule
    may move it on, as the watchdog does after a gap), `policy`, `component`
    (for the log), `now_us` (the event's time, epoch us), and what the rules
    accumulate: `effects`, `events` (log lines) and `dead_letters`."""

    state: RoomState
    policy: Policy
    component: str
    now_us: int
    effects: list[Effect] = field(default_factory=list)
    events: list[DeliveryEvent] = field(default_factory=list)
    dead_letters: list[KeepDeadLetter] = field(default_factory=list)


def log(t: Transition, event: EventType, msg: QueuedMessage | None = None, /, **fields: object) -> None:
    if msg is not None:
        fields.setdefault("seq", msg.seq)
        fields.setdefault("message_id", msg.message_id)
        fields.setdefault("provider", msg.provider)
    t.events.append(DeliveryEvent(event=event, ts=utc_iso(t.now_us), component=t.component,
                                  room_id=t.state.room_id, **fields))  # type: ignore[arg-type]


def arm(t: Transition, state: RoomState, flight: InFlight) -> RoomState:
    t.effects.append(ScheduleTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                   flight.due_at_us))
    return replace(state, in_flight=flight)


def record_end(t: Transition, state: RoomState, msg: QueuedMessage, outcome: EventType, attempts: int = 0) -> RoomState:
    """Count the end and remember it (de-duplication, late statuses); a
    dead letter also keeps the attempt numbers it took (`attempts`)."""
    counts = dict(state.counts)
    counts[str(outcome)] = counts.get(str(outcome), 0) + 1
    kept = attempts if outcome == EventType.DEAD_LETTERED else 0
    ended = (*state.ended, Ended(msg.seq, msg.message_id, str(outcome), kept))[-t.policy.dedup_retention:]
    return replace(state, counts=counts, ended=ended)


def cancel_pending_timer(t: Transition, state: RoomState, flight: InFlight) -> None:
    """An attempt ending before its wake-up leaves a timer task that can
    only be ignored: ask for it to be deleted (after the next send)."""
    if flight.due_at_us > t.now_us:
        t.effects.append(CancelTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                     flight.due_at_us))


def put(t: Transition, state: RoomState, msg: QueuedMessage, index: int | None) -> RoomState:
    """`state` with message `msg` replacing the one at `index` (None: in flight)."""
    if index is None:
        assert state.in_flight is not None
        return replace(state, in_flight=replace(state.in_flight, message=msg))
    return replace(state, pending=(*state.pending[:index], msg, *state.pending[index + 1:]))


def wait_until(t: Transition, state: RoomState, flight: InFlight, wake_us: int, **changes: Any) -> RoomState:
    """Keep waiting: the attempt's wake-up moves to `wake_us` (a new timer),
    or to the next ms when `wake_us` is in the ms of its current wake-up: a
    timer's name holds its attempt and due ms (shared/tasks.py:task_id), and
    the task of the current one exists (most often it is the one running,
    delivered early: Cloud Tasks' clock runs ahead of the function's).
    Armed again under that name, Cloud Tasks would refuse it as a duplicate
    for about an hour, and the room would wait for the watchdog."""
    if wake_us // 1000 == flight.due_at_us // 1000:
        wake_us = (wake_us // 1000 + 1) * 1000
    flight = replace(flight, due_at_us=wake_us, **changes)
    if wake_us > t.now_us:
        log(t, EventType.TIMER_REARMED, flight.message, attempt=flight.attempt, reason=str(flight.phase))
    return arm(t, state, flight)


def with_incarnation(t: Transition) -> RoomState:
    """The state, with an incarnation if this event creates the document."""
    if t.state.incarnation:
        return t.state
    return replace(t.state, incarnation=t.now_us)


def current(t: Transition, incarnation: int, seq: int, attempt: int | None = None) -> InFlight | None:
    """The in-flight attempt if it is (incarnation, seq[, attempt]), else None."""
    flight = t.state.in_flight
    if flight is None or incarnation != t.state.incarnation or flight.message.seq != seq:
        return None
    if attempt is not None and flight.attempt != attempt:
        return None
    return flight


def send_tries(flight: InFlight) -> int:
    """Sends of the in-flight message since its (re)entry: what
    MAX_SEND_ATTEMPTS bounds (a redrive starts a new count, never a new
    attempt number)."""
    return flight.attempt - flight.message.attempt_floor
