"""What a decision asks for after the commit (send, arm or cancel a timer,
prepare) and the decision itself.

Plain data: the service runs the effects. Must not decide anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.events import DeliveryEvent
from shared.room.state import QueuedMessage, RoomState, Trigger


@dataclass(frozen=True)
class Send:
    """Send `message` as `attempt`, if the call can start by `start_by_us`.

    `trigger` names what freed the room; `trigger_at_us` is when that request
    arrived; `cause` is its idempotency key (carried into `SendReturned`);
    `number`: WhatsApp, the phone-number id it goes out from (the attempt's
    `InFlight.number`), None for other platforms."""

    room_id: str
    incarnation: int
    message: QueuedMessage
    attempt: int
    delivery_id: str
    trigger: Trigger
    trigger_at_us: int
    start_by_us: int
    cause: str
    number: str | None = None

@dataclass(frozen=True)
class ScheduleTimer:
    """Arm a Cloud Tasks timer for (incarnation, seq, attempt) due at `due_at_us`.

    `accepted_deadline_us` (epoch us), set by the service only: the ack
    deadline of the attempt's send, which the service saw return ACCEPTED
    (WhatsApp) before arming this timer; the timer carries it to the room
    (`TimerFired.accepted_deadline_us`) instead of a blind write of the room.
    Not part of the task's name (`shared.tasks.task_id`)."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int
    accepted_deadline_us: int | None = None

@dataclass(frozen=True)
class CancelTimer:
    """Delete the still-pending timer task of (incarnation, seq, attempt) due at
    `due_at_us`: its attempt has ended before the timer was due (an ack, a
    failure, a skip). Saves the task's dispatch and the `timeout` call that
    would only log `timeout_ignored`. Best effort: a timer that is not deleted
    fires and is ignored, as every stale timer is."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int

@dataclass(frozen=True)
class Prepare:
    """Ask the `prepare` function to prepare message `seq` (attempt
    `attempt` of its preparation), at `due_at_us` (now, or after a failed
    attempt's backoff): a Cloud Tasks task whose name derives from (room,
    incarnation, seq, attempt), so asking twice makes one task on the real
    service, and a preparation that runs twice uploads twice at worst (the
    room keeps the first result)."""

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    due_at_us: int

@dataclass(frozen=True)
class KeepDeadLetter:
    """A message baton gave up on, with its body, kept for a later redrive.
    Data written in the same transaction as the room (`Decision.dead_letters`),
    not an effect run after the commit."""

    room_id: str
    incarnation: int
    message: QueuedMessage
    attempts: int
    reason: str

Effect = Send | ScheduleTimer | CancelTimer | Prepare

@dataclass(frozen=True)
class Decision:
    """The result of one event: the new state (None: nothing to write), the
    effects to run after the commit, and the events to log after the commit.
    `refused` is set when the room pushes back (room full): the push is
    answered 503 so Pub/Sub redelivers later; `state` may still carry the
    marker that remembers it. `dead_letters` are written with the room, in
    its transaction."""

    state: RoomState | None
    effects: tuple[Effect, ...] = ()
    events: tuple[DeliveryEvent, ...] = ()
    refused: str | None = None
    dead_letters: tuple[KeepDeadLetter, ...] = ()
