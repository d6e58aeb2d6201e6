"""The rulebook's entry point: `decide(state, event, policy, component)`.

Dispatches each event to the rule of its concern; must not hold rules itself.
"""

from __future__ import annotations

from shared.room.effects import Decision
from shared.room.entry import EntryRules
from shared.room.flight import FlightRules
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
from shared.room.operator_actions import OperatorRules
from shared.room.preparation import PreparationRules
from shared.room.receipts import ReceiptRules
from shared.room.state import Policy, RoomState


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


class Transition(EntryRules, FlightRules, ReceiptRules, PreparationRules, OperatorRules):
    """One `decide` call: the primitives (TransitionCore) and every concern's rules."""


# The rulebook's entry: which rule applies to which event. Anything else is refused.
_HANDLERS = {
    Enqueue: Transition.enqueue,
    Park: Transition.park,
    SendReturned: Transition.send_returned,
    StatusUpdate: Transition.status,
    RecipientReceipt: Transition.receipt,
    TimerFired: Transition.timer,
    WatchdogSweep: Transition.sweep,
    Redrive: Transition.redrive,
    Skip: Transition.skip,
    Pause: Transition.pause,
    Resume: Transition.resume,
    Prepared: Transition.prepared,
    PrepareFailed: Transition.prepare_failed,
}
