"""The rulebook's entry point: `decide(state, event, policy, component)`.

Dispatches each event to the rule of its concern; must not hold rules itself.
"""

from __future__ import annotations

from shared.room.context import Transition
from shared.room.effects import Decision
from shared.room.entry import enqueue, park
from shared.room.flight import send_returned, status
from shared.room.inputs import (
    Enqueue,
    Park,
    Pause,
    Prepared,
    PrepareFailed,
    RecipientReceipt,
    Redrive,
    Resume,
    RoomEvent,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
)
from shared.room.operator_actions import pause, redrive, resume, skip
from shared.room.preparation import prepare_failed, prepared
from shared.room.receipts import receipt
from shared.room.state import Policy, RoomState
from shared.room.timers import sweep, timer


def decide(state: RoomState, event: RoomEvent, policy: Policy, component: str) -> Decision:
    """Apply one event to one room.

    Args:
        state: the room as stored (a fresh `RoomState(room_id)` for a new room).
        event: what happened.
        policy: timeouts (ms) and limits.
        component: the function handling the event, for the log.

    Returns:
        A `Decision`. Never raises on a stale, duplicate or late event: those
        yield no state change and an `*_ignored` log event.
    """
    t = Transition(state, policy, component, event.at_us)
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"unknown room event {event!r}")
    return handler(t, event)


# The rulebook's entry: which rule applies to which event. Anything else is refused.
_HANDLERS = {
    Enqueue: enqueue,
    Park: park,
    SendReturned: send_returned,
    StatusUpdate: status,
    RecipientReceipt: receipt,
    TimerFired: timer,
    WatchdogSweep: sweep,
    Redrive: redrive,
    Skip: skip,
    Pause: pause,
    Resume: resume,
    Prepared: prepared,
    PrepareFailed: prepare_failed,
}
