"""Enqueue handlers: a Pub/Sub push (and a scheduled message's task bringing it
back), and the dead-letter topic's copy of a push Pub/Sub gave up on.

Parses pushes and applies them; must not touch statuses, timers or preparation.
"""

from __future__ import annotations

import json

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.push import Rejected, parse_push
from shared.room import Park
from shared.service.core import DEAD_LETTER_COUNT_ATTRIBUTE, Reply, ServiceCore
from shared.service.scheduled_entry import ScheduledEntry


class EnqueueHandlers:
    """Pushes and dead-letter copies.

    Args:
        core: applies each event to its room (shared/service/core.py).
        scheduled: holds or drops a message with a later time (scheduled_entry.py).
    """

    def __init__(self, core: ServiceCore, scheduled: ScheduledEntry) -> None:
        self.core = core
        self.scheduled = scheduled

    def handle_push(self, body: bytes, scheduled_entry: bool = False) -> Reply:
        """A Pub/Sub push, or (`scheduled_entry`) a scheduled message's task
        bringing the same envelope back at its time. 2xx acks it; 503 (room
        full) makes Pub/Sub (or Cloud Tasks) deliver it again later; the room
        remembers it at its place meanwhile. A message due later than
        ENTER_AT_ONCE_MS from now waits as a task (`scheduled`); one whose
        scheduled time has come enters unless an operator cancelled it
        (scheduled_entry.py)."""
        arrived = self.core.now_us()
        parsed = parse_push(body, arrived, self.core.settings.enabled_providers, self.core.sender_ids)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "enqueue")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        if parsed.deliver_at_us is not None and self.core.scheduled is not None:
            held_or_dropped = self.scheduled.hold_or_drop(parsed, body, arrived, scheduled_entry)
            if held_or_dropped is not None:
                return held_or_dropped
        decision = self.core.apply(parsed.room_id, parsed.event, "enqueue")
        if decision.refused:
            return Reply(503, {"result": "backpressure", "reason": decision.refused})
        return Reply(200, {"result": "ok"})

    def handle_dead_letter(self, body: bytes) -> Reply:
        """A push from the dead-letter topic: the message is parked at its place
        in its room, which blocks there until an operator acts. A scheduled
        one is another way in at (or before) its time, so it goes the way
        every copy of it goes first (scheduled_entry.py): held as a task
        while its time is ahead, ended `skipped` when an operator cancelled
        it; parked only when its time has come (found by the simulation,
        seed 271: a cancelled campaign message's dead-letter copy was parked,
        then redriven and sent)."""
        arrived = self.core.now_us()
        parsed = parse_push(body, arrived, self.core.settings.enabled_providers, self.core.sender_ids)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "deadletter")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        if parsed.deliver_at_us is not None and self.core.scheduled is not None:
            held_or_dropped = self.scheduled.hold_or_drop(parsed, body, arrived, False)
            if held_or_dropped is not None:
                return held_or_dropped
        attrs = (json.loads(body).get("message") or {}).get("attributes") or {}
        attempts = attrs.get(DEAD_LETTER_COUNT_ATTRIBUTE, "?")
        e = parsed.event
        park = Park(e.message_id, e.provider, e.recipient, e.text, e.published_at_us, arrived,
                    f"dead-lettered by Pub/Sub after {attempts} delivery attempts", media_kind=e.media_kind,
                    media_link=e.media_link, prepare=e.prepare, sequence=e.sequence, sender=e.sender,
                    default_sender=e.default_sender, payload=e.payload)
        self.core.apply(parsed.room_id, park, "deadletter")
        return Reply(200, {"result": "parked"})

    def _keep_rejected(self, rejected: Rejected, arrived: int, component: str) -> None:
        self.core.store.keep_rejected(rejected.key, rejected.reason, rejected.record)
        self.core.events.emit(DeliveryEvent(EventType.REJECTED, utc_iso(arrived), component, rejected.room_id,
                                       message_id=rejected.message_id, reason=rejected.reason))
