"""The request handlers, between the entry points and the room's rules.

Each handler parses its request, runs the room's optimistic transaction
(shared/store.py calling shared/room's `decide`), then, after the commit,
logs the events and runs the effects in order: arm the timer first, then send,
so a send that dies half-way is still covered by a timer. A send's outcome
(accepted, refused, unknown) goes back into the room as a `SendReturned`
event, which may start the next message; the loop follows it.

Failures, and what the room does:
- Firestore unreachable or a room contended past the retry budget: the handler
  raises, the entry point answers 503, the caller (Pub/Sub, Meta, Cloud Tasks,
  Cloud Scheduler) retries; nothing was committed, or the commit stands and
  the retry is a recognised duplicate.
- A timer that cannot be armed (after a few quick tries): logged as
  `timer_arm_failed`, the send still goes out (the room's stored `wake_at_us`
  lets the watchdog find it), and the request answers 503 so its redelivery
  re-arms the timer (`rearm_if_replay`).
- A crash between any two steps: the committed state stands; its timer, a
  redelivery or the watchdog wakes the room (shared/room/, "Wake-ups").

Handlers return a `Reply` (HTTP status, JSON body); the entry points only
translate it.

The package, one module per entry point (docs/architecture.md, "Where is
what"): core (apply an event and run its effects), enqueue (with
scheduled_entry), webhook, statuses, timers, preparation. Each handler is an
object that holds the `ServiceCore` it needs as a field (and the webhook also
the status handlers it routes through); `DeliveryService` builds them and is
the entry points' one facade.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from shared.config import Settings
from shared.events import EventLog
from shared.outcomes import OutcomePublisher
from shared.ports import Clock, RoomStore, ScheduledHolds, StatusPublisher, Timers
from shared.providers import Sender
from shared.room import Decision, Policy, Redrive, RoomEvent, Skip
from shared.service.core import (
    DEAD_LETTER_COUNT_ATTRIBUTE,
    TRANSIENT_ERRORS,
    Reply,
    ServiceCore,
    TimerArmFailed,
    now_us,
    start_request,
)
from shared.service.enqueue import EnqueueHandlers
from shared.service.preparation import PreparationHandlers
from shared.service.scheduled_entry import ScheduledEntry
from shared.service.sent_proofs import SentProofRecord
from shared.service.statuses import StatusHandlers
from shared.service.timers import TimerHandlers
from shared.service.webhook import WebhookHandlers

if TYPE_CHECKING:
    from shared.admin.incident import IncidentSwitch

__all__ = ["DEAD_LETTER_COUNT_ATTRIBUTE", "TRANSIENT_ERRORS", "DeliveryService", "Reply", "ServiceCore",
           "TimerArmFailed", "now_us", "start_request"]


class DeliveryService:
    """Handles pushes, dead-letter pushes, status webhooks, timers, watchdog
    sweeps and prepare tasks for every room: a facade over one `ServiceCore`
    (`core`) and the handler objects that hold it (`enqueue`, `webhook`,
    `statuses`, `timer_handlers`, `preparation`). Each `handle_*` method
    passes its request to the one handler object that owns it.

    Args:
        core: the ports, settings, policy and seams every handler shares
            (`ServiceCore`, shared/service/core.py, where its arguments are
            described); shared/bootstrap.py `wire` builds it on the
            production adapters, tests and the simulation on fakes.
    """

    def __init__(self, core: ServiceCore) -> None:
        self._compose(core)

    def _compose(self, core: ServiceCore) -> None:
        """The handler objects, each holding `core`."""
        self.core = core
        self.statuses = StatusHandlers(core)
        self.webhook = WebhookHandlers(core, self.statuses)
        self.enqueue = EnqueueHandlers(core, ScheduledEntry(core))
        self.timer_handlers = TimerHandlers(core)
        self.preparation = PreparationHandlers(core)

    def with_events(self, events: EventLog) -> DeliveryService:
        """This service writing its delivery events to `events` instead (the
        operators' actions log theirs: shared/admin/service.py); the same
        ports and instance state (a shallow copy of the core) otherwise."""
        core = copy.copy(self.core)
        core.events = events
        other = copy.copy(self)
        other._compose(core)
        return other

    # The entry points' handlers (functions/main.py), each passed to its object.

    def handle_push(self, body: bytes, scheduled_entry: bool = False) -> Reply:
        """`enqueue`: a Pub/Sub push (`EnqueueHandlers.handle_push`)."""
        return self.enqueue.handle_push(body, scheduled_entry)

    def end_cancelled_scheduled(self, room_id: str, message_id: str, at_us: int) -> str:
        """A cancelled scheduled message's end, by the cancel (`ScheduledEntry.end_cancelled`)."""
        return self.enqueue.scheduled.end_cancelled(room_id, message_id, None, at_us, "admin")

    def handle_dead_letter(self, body: bytes) -> Reply:
        """`deadletter`: a dead-letter topic's push (`EnqueueHandlers.handle_dead_letter`)."""
        return self.enqueue.handle_dead_letter(body)

    def handle_handshake(self, args: dict[str, str]) -> Reply:
        """`webhook` GET: Meta's verification (`WebhookHandlers.handle_handshake`)."""
        return self.webhook.handle_handshake(args)

    def handle_status_webhook(self, raw: bytes, signature: str | None) -> Reply:
        """`webhook` POST: a signed post (`WebhookHandlers.handle_status_webhook`)."""
        return self.webhook.handle_status_webhook(raw, signature)

    def handle_status_push(self, body: bytes) -> Reply:
        """`status`: a status-queue push (`StatusHandlers.handle_status_push`)."""
        return self.statuses.handle_status_push(body)

    def handle_timer(self, body: bytes) -> Reply:
        """`timeout`: a Cloud Tasks timer (`TimerHandlers.handle_timer`)."""
        return self.timer_handlers.handle_timer(body)

    def handle_sweep(self) -> Reply:
        """`sweep`: the watchdog (`TimerHandlers.handle_sweep`)."""
        return self.timer_handlers.handle_sweep()

    def handle_prepare(self, body: bytes) -> Reply:
        """`prepare`: a prepare task (`PreparationHandlers.handle_prepare`)."""
        return self.preparation.handle_prepare(body)

    def apply(self, room_id: str, event: RoomEvent, component: str) -> Decision:
        """Apply one event to a room and run its effects (`ServiceCore.apply`)."""
        return self.core.apply(room_id, event, component)

    def redrive(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """Release the parked message `seq` of a room: it is sent in its turn
        (the simulation's operator; the `baton` CLI and the admin function go
        through shared/operators.py, which applies the same event)."""
        return self.core.apply(room_id, Redrive(seq, actor, reason, self.core.now_us()), "operator")

    def skip(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """End message `seq` of a room (in flight or queued) as `skipped` (as `redrive`)."""
        return self.core.apply(room_id, Skip(seq, actor, reason, self.core.now_us()), "operator")

    def record_invocation(self, function: str, started_us: int, status: int) -> None:
        """This request's operation counts to METRICS_LOG_PATH (`ServiceCore.record_invocation`)."""
        self.core.record_invocation(function, started_us, status)

    def status_queue(self) -> StatusPublisher:
        """The status-queue publisher (`ServiceCore.status_queue`)."""
        return self.core.status_queue()

    # The core's ports, read-only (the operators' tools and the admin function read them).

    @property
    def clock(self) -> Clock:
        return self.core.clock

    @property
    def settings(self) -> Settings:
        return self.core.settings

    @property
    def policy(self) -> Policy:
        return self.core.policy

    @property
    def store(self) -> RoomStore:
        return self.core.store

    @property
    def timers(self) -> Timers:
        return self.core.timers

    @property
    def senders(self) -> dict[str, Sender]:
        return self.core.senders

    @property
    def events(self) -> EventLog:
        return self.core.events

    @property
    def outcomes(self) -> OutcomePublisher | None:
        return self.core.outcomes

    @property
    def incident(self) -> IncidentSwitch | None:
        return self.core.incident

    @property
    def scheduled(self) -> ScheduledHolds | None:
        return self.core.scheduled

    @property
    def sent_proofs(self) -> SentProofRecord:
        return self.core.sent_proofs
