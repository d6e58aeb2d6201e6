"""The preparation window: which messages are prepared now (the head of
line and the `prepare_ahead` behind it), asking for their preparations,
the head waiting for its own, and PREPARE_POISON at the head.

Used by the baton's primitives (transition.py) and the rules; must not
pass the baton itself.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import Transition, arm, log, record_end
from shared.room.effects import KeepDeadLetter, Prepare
from shared.room.state import PREPARE_PARK_REASON, InFlight, Phase, QueuedMessage, RoomState


def preparation_window(t: Transition, state: RoomState) -> list[QueuedMessage]:
    """The messages whose preparation may run now: the head of line (in
    flight, or the first queued) and the `prepare_ahead` queued behind it."""
    if state.in_flight is not None:
        return [state.in_flight.message, *state.pending[:t.policy.prepare_ahead]]
    return list(state.pending[:t.policy.prepare_ahead + 1])


def request_preparations(t: Transition, state: RoomState) -> RoomState:
    """Ask once for the preparation of every message of the window that
    needs one and was not asked for since its (re)entry, as its next
    preparation attempt (a number never used for it, so a task name never
    used before). Placeholders and parked messages wait (a redrive
    releases them)."""
    fresh = {m.seq: m.prep_attempt + 1 for m in preparation_window(t, state)
             if m.needs_preparation and not m.preparation_asked and m.text is not None and not m.parked
             and m.prep_failed is None}
    if not fresh:
        return state
    for seq, attempt in sorted(fresh.items()):
        t.effects.append(Prepare(state.room_id, state.incarnation, seq, attempt, t.now_us))

    def asked(m: QueuedMessage) -> QueuedMessage:
        return replace(m, prep_attempt=fresh[m.seq]) if m.seq in fresh else m

    flight = state.in_flight
    if flight is not None and flight.message.seq in fresh:
        flight = replace(flight, message=asked(flight.message))
    return replace(state, in_flight=flight, pending=tuple(asked(m) for m in state.pending))


def wait_for_preparation(t: Transition, state: RoomState, msg: QueuedMessage, cause: str) -> RoomState:
    """The head of line holds the baton unsent until its preparation's
    result comes (PREPARING), with a timer at PREPARE_TIMEOUT_MS that asks
    for it again should the result never come."""
    log(t, EventType.PREPARING, msg,
        reason=f"preparation attempt {max(msg.prep_floor + 1, msg.prep_attempt)} under way")
    due = t.now_us + t.policy.prepare_timeout_ms * 1000
    return arm(t, state, InFlight(msg, msg.next_attempt, t.now_us, Phase.PREPARING, due, cause))


def poison(t: Transition, state: RoomState, msg: QueuedMessage) -> RoomState:
    """The queued head whose preparation was given up ends by PREPARE_POISON
    (`dead_letter`; `park` parks it at once when the preparation is given up)."""
    assert state.pending and state.pending[0] is msg
    if t.policy.prepare_poison == "park":
        parked = replace(msg, parked=f"{PREPARE_PARK_REASON}: {msg.prep_failed}")
        log(t, EventType.PARKED, parked, reason=parked.parked)
        return replace(state, pending=(parked, *state.pending[1:]))
    reason = f"{PREPARE_PARK_REASON}: {msg.prep_failed}"
    t.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation, msg, 0, reason))
    log(t, EventType.DEAD_LETTERED, msg, reason=reason)
    return replace(record_end(t, state, msg, EventType.DEAD_LETTERED, msg.attempts), pending=state.pending[1:])


def ask_again_if_replay(t: Transition, message_id: str) -> None:
    """A redelivered push of a message whose preparation is asked for and
    not done asks for it again (same task name, so idempotent on the real
    service): its first delivery may have died before the task was made."""
    window = preparation_window(t, t.state)
    for m in window:
        if m.message_id == message_id and m.needs_preparation and m.preparation_asked and m.prep_failed is None:
            t.effects.append(Prepare(t.state.room_id, t.state.incarnation, m.seq, m.prep_attempt,
                                     t.now_us))
