"""The rulebook of one room: `decide(state, event, policy, component) -> Decision`.

No I/O happens here, nor the room's stored form. The store adapter
(shared/store.py, shared/room_document.py) reads a room's state, applies
the facts written outside its transaction (each through `decide`), calls
`decide`, and commits the new state with a conditional write (an
optimistic transaction); only after the commit does the service run the
effects (arm a timer, send a message) and log the events. The
read-decide-write loop may run several times, so effects are data until then.

The baton: a room has at most one message in flight. Its queue (`pending`)
holds the later messages in the order they entered the room. A message ends
exactly once: acked, failed, timed out, dead-lettered or skipped. When the
in-flight message ends, the head of the queue starts in the same transaction,
so a room never idles while it holds a sendable message (no lost wake-up).

An attempt (one send of one message) goes through these phases:

    SENDING --send returned: accepted--> SENT    --deadline, no ack--> timed out
            --send returned: unknown---> UNKNOWN --deadline, no ack--> resent
            --send returned: refused---> BACKOFF --retry due---------> resent
            --no outcome recorded by the send window's end-----------> resent

A delivered/read status for any attempt of the in-flight message acks it, in
any phase. The ack deadline of SENT and UNKNOWN is measured from when the send
call *returned*, so a message is held at least `ack_timeout_ms` after the
platform could have had it. A send call may only start within
`send_start_deadline_ms` of its decision and lasts at most `send_timeout_ms`,
so an attempt whose outcome was never recorded (a crash) is past any possible
send at `started + start deadline + send timeout`, and is held `ack_timeout_ms`
beyond that before it is resent.

Wake-ups: every waiting attempt has `due_at_us`, the time its timer task is
due, stored as the room's top-level `wake_at_us`. A timer that comes before
the room's deadline arms a new one for the rest; the watchdog sweep re-drives
rooms whose wake-up is overdue (a timer that could not be armed, or was lost).

Fencing: a timer or status names (incarnation, seq, attempt). The attempt is
the fencing token of a send; the incarnation (the room document's creation
time, epoch us) tells an old room from a new one with the same id after TTL
deleted the first.

Parking: a push refused under back-pressure is remembered (`awaiting`) at its
place. Pub/Sub delivers a room's messages one at a time in order, so when a
later message of the room arrives, the awaited one has been dead-lettered: it
gets a placeholder at its place in the queue, and its copy from the dead-letter
topic fills it (`Park`). A parked message at the head blocks the room (visibly,
`blocked_reason`) until an operator redrives it or skips it.

Operators (shared/operators.py, the `baton` CLI) act through events of this
rulebook like everything else, each in one transaction, each logged with its
actor and reason, each a no-op the second time:

- `Pause`: nothing new starts (the queue keeps accepting messages); a message
  already in flight ends by its own rules (ack, timeout, failure, its
  resends). `Resume` starts the head again.
- `Skip`: the message ends as `skipped`. A queued one leaves the queue; the
  in-flight one passes the baton at once, unless its send call may still be
  under way (SENDING, inside the send window): then, as for `acked_early`,
  the baton passes only once that call cannot go out any more, so no copy of
  the skipped message can follow the next one.
- `Redrive`: a parked message is released in its place; a message baton
  dead-lettered (kept in `dead_letters/`) goes back to the head of the queue,
  ahead of every message that came after it (by seq), and is sent as soon as
  nothing is in flight.

Times are epoch microseconds (`*_us`) inside the state and events; policy
durations are milliseconds (`*_ms`).

The package, one module per concern (docs/architecture.md, "Where is what"):
state (the room and its policy), inputs (events, and the facts written
outside the transaction), effects (and the decision), ids (delivery ids),
context (the transition
context every rule takes: state, policy, now, effects, events), window
(the preparation window), transition (the baton's primitives), entry,
flight, timers, receipts, preparation, pacing, operator_actions and facts
(the rules by concern, plain functions over the context), rulebook (the table
that drives `decide`: (phase, kind) -> function, then) and decide (the
entry point). Everything is re-exported here: `from shared.room import decide`.
"""

from __future__ import annotations

from shared.room.context import (  # noqa: F401
    Transition,
)
from shared.room.decide import (  # noqa: F401
    WITHOUT_ROOM,
    RuleBroken,
    decide,
    decide_by,
    decided_without_room,
)
from shared.room.effects import (  # noqa: F401
    CancelTimer,
    Decision,
    Effect,
    KeepDeadLetter,
    Prepare,
    ScheduleTimer,
    Send,
)
from shared.room.ids import (  # noqa: F401
    make_delivery_id,
    parse_delivery_id,
)
from shared.room.inputs import (  # noqa: F401
    AcceptanceRecorded,
    EchoRecorded,
    Enqueue,
    Park,
    Pause,
    Prepared,
    PrepareFailed,
    RecipientReceipt,
    Redrive,
    Resume,
    RoomEvent,
    RoomFact,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
)
from shared.room.pacing import (  # noqa: F401
    bucket_now,
    token_ready_at_us,
)
from shared.room.rulebook import (  # noqa: F401
    RULE_INDEX,
    RULES,
    RoomPhase,
    Rule,
    event_kind,
    room_phase,
    rule_for,
)
from shared.room.state import (  # noqa: F401
    ACK_LEVELS,
    ACK_STATUSES,
    PREPARE_PARK_REASON,
    Ended,
    IgnoreReason,
    InFlight,
    Paused,
    Phase,
    Policy,
    QueuedMessage,
    RoomState,
    SendOutcome,
    Trigger,
    ack_deadline_us,
    acks,
    awaits_platform_proof,
    policy_from_settings,
    watermark_covers,
)

__all__ = [
    "ACK_LEVELS",
    "ACK_STATUSES",
    "Ended",
    "IgnoreReason",
    "InFlight",
    "PREPARE_PARK_REASON",
    "Paused",
    "Phase",
    "Policy",
    "QueuedMessage",
    "RoomState",
    "SendOutcome",
    "Trigger",
    "ack_deadline_us",
    "acks",
    "awaits_platform_proof",
    "policy_from_settings",
    "watermark_covers",
    "AcceptanceRecorded",
    "EchoRecorded",
    "Enqueue",
    "Park",
    "Pause",
    "PrepareFailed",
    "Prepared",
    "RecipientReceipt",
    "Redrive",
    "Resume",
    "RoomEvent",
    "RoomFact",
    "SendReturned",
    "Skip",
    "StatusUpdate",
    "TimerFired",
    "WatchdogSweep",
    "CancelTimer",
    "Decision",
    "Effect",
    "KeepDeadLetter",
    "Prepare",
    "ScheduleTimer",
    "Send",
    "make_delivery_id",
    "parse_delivery_id",
    "bucket_now",
    "token_ready_at_us",
    "Transition",
    "decide",
    "decide_by",
    "decided_without_room",
    "WITHOUT_ROOM",
    "RuleBroken",
    "RULE_INDEX",
    "RULES",
    "RoomPhase",
    "Rule",
    "event_kind",
    "room_phase",
    "rule_for",
]
