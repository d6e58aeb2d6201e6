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
what"): core (apply an event and run its effects), enqueue, webhook,
statuses, timers, preparation, operator_actions; `DeliveryService` puts them
together.
"""

from __future__ import annotations

from shared.service.core import (
    DEAD_LETTER_COUNT_ATTRIBUTE,
    TRANSIENT_ERRORS,
    Reply,
    TimerArmFailed,
    now_us,
    start_request,
)
from shared.service.enqueue import EnqueueHandlers
from shared.service.operator_actions import OperatorHandlers
from shared.service.preparation import PreparationHandlers
from shared.service.statuses import StatusHandlers
from shared.service.timers import TimerHandlers
from shared.service.webhook import WebhookHandlers

__all__ = ["DEAD_LETTER_COUNT_ATTRIBUTE", "TRANSIENT_ERRORS", "DeliveryService", "Reply", "TimerArmFailed", "now_us",
           "start_request"]


class DeliveryService(EnqueueHandlers, WebhookHandlers, StatusHandlers, TimerHandlers, PreparationHandlers,
                      OperatorHandlers):
    """Handles pushes, dead-letter pushes, status webhooks, timers, watchdog
    sweeps and operator actions for every room.

    Args:
        settings: the environment's settings.
        policy: the room policy (timeouts in ms, limits).
        store: the Firestore adapter (or a fake with the same methods).
        timers: the Cloud Tasks adapter (or a fake with `schedule`).
        senders: provider name -> platform client.
        events: where delivery events go.
        status_queue: builds the status-queue publisher on first use (queued
            webhook mode; the functions that never publish never build it).
        scheduled: holds messages with a later `deliver_at` (shared/scheduled.py),
            or None (such a message then enters its room at once).
        prepare_tasks: creates the prepare tasks (shared/prepare.py, or a fake
            with `request`); None: a `Prepare` effect fails like a timer that
            cannot be armed.
        preparers: provider name -> what prepares its messages (uploads media).
    """
