"""Enqueue handlers: a Pub/Sub push (and a scheduled message's task bringing it
back), and the dead-letter topic's copy of a push Pub/Sub gave up on.

Parses pushes and applies them; must not touch statuses, timers or preparation.
"""

from __future__ import annotations

import json

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.push import Rejected, parse_push
from shared.room import (
    Park,
)
from shared.scheduled import ENTER_AT_ONCE_MS
from shared.service import core
from shared.service.core import DEAD_LETTER_COUNT_ATTRIBUTE, Reply, ServiceCore


class EnqueueHandlers(ServiceCore):
    """Pushes and dead-letter copies."""

    def handle_push(self, body: bytes, scheduled_entry: bool = False) -> Reply:
        """A Pub/Sub push, or (`scheduled_entry`) a scheduled message's task
        bringing the same envelope back at its time. 2xx acks it; 503 (room
        full) makes Pub/Sub (or Cloud Tasks) deliver it again later; the room
        remembers it at its place meanwhile. A message due later than
        ENTER_AT_ONCE_MS from now waits as a task (`scheduled`); one whose
        scheduled time has come enters unless an operator cancelled it."""
        arrived = core.now_us()
        parsed = parse_push(body, arrived, self.settings.enabled_providers)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "enqueue")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        e = parsed.event
        due = parsed.deliver_at_us
        if due is not None and self.scheduled is not None:
            if due > arrived + ENTER_AT_ONCE_MS * 1000:
                hop = self.scheduled.hold(e.message_id, body, due, arrived)
                self.events.emit(DeliveryEvent(EventType.SCHEDULED, utc_iso(arrived), "enqueue", parsed.room_id,
                                               message_id=e.message_id, provider=e.provider,
                                               reason=f"enters its room at {utc_iso(due)}"
                                                      + (f" (next hop {utc_iso(hop)})" if hop < due else "")))
                return Reply(200, {"result": "scheduled", "deliver_at": utc_iso(due)})
            if scheduled_entry:
                cancel = self.store.scheduled_cancelled(e.message_id)
                if cancel is not None:
                    # Ends unsent, as an operator's skip does.
                    self.events.emit(DeliveryEvent(EventType.SKIPPED, utc_iso(arrived), "enqueue", parsed.room_id,
                                                   message_id=e.message_id, provider=e.provider,
                                                   actor=cancel.get("actor"),
                                                   reason=f"scheduled message cancelled before its time: "
                                                          f"{cancel.get('reason')}"[:300]))
                    return Reply(200, {"result": "cancelled"})
        decision = self.apply(parsed.room_id, parsed.event, "enqueue")
        if decision.refused:
            return Reply(503, {"result": "backpressure", "reason": decision.refused})
        return Reply(200, {"result": "ok"})

    def handle_dead_letter(self, body: bytes) -> Reply:
        """A push from the dead-letter topic: the message is parked at its place
        in its room, which blocks there until an operator acts."""
        arrived = core.now_us()
        parsed = parse_push(body, arrived, self.settings.enabled_providers)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "deadletter")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        attrs = (json.loads(body).get("message") or {}).get("attributes") or {}
        attempts = attrs.get(DEAD_LETTER_COUNT_ATTRIBUTE, "?")
        e = parsed.event
        park = Park(e.message_id, e.provider, e.recipient, e.text, e.published_at_us, arrived,
                    f"dead-lettered by Pub/Sub after {attempts} delivery attempts", media_kind=e.media_kind,
                    media_link=e.media_link, prepare=e.prepare, sequence=e.sequence)
        self.apply(parsed.room_id, park, "deadletter")
        return Reply(200, {"result": "parked"})

    def _keep_rejected(self, rejected: Rejected, arrived: int, component: str) -> None:
        self.store.keep_rejected(rejected.key, rejected.reason, rejected.record)
        self.events.emit(DeliveryEvent(EventType.REJECTED, utc_iso(arrived), component, rejected.room_id,
                                       message_id=rejected.message_id, reason=rejected.reason))
