"""Scheduled entry: a push whose message has a later time (`deliver_at`,
`delay_s`) waits as a Cloud Tasks task; when its time comes, by its task or by
a redelivery of the original push, a cancelled one ends once as `skipped`.

Holds and drops scheduled messages; must not touch a room (enqueue.py does,
for a message that enters).
"""

from __future__ import annotations

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.outcomes import CANCELLED_REASON, outcome_record
from shared.push import Accepted
from shared.scheduled import ENTER_AT_ONCE_MS
from shared.service.core import Reply, ServiceCore


class ScheduledEntry:
    """The scheduled part of the `enqueue` function.

    Args:
        core: the store, the scheduled-message tasks, the event log and the
            outcomes topic (shared/service/core.py).
    """

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    def hold_or_drop(self, parsed: Accepted, body: bytes, arrived: int, scheduled_entry: bool) -> Reply | None:
        """What becomes of a push with a `deliver_at_us`: its reply when it is
        held (its time is more than ENTER_AT_ONCE_MS away) or dropped (an
        operator cancelled it), or None when it enters its room now.

        - Held: a task brings it back (shared/scheduled.py), recorded for a
          cancel (one write). A hop task that came early holds it again under
          a name of its own.
        - Its time has come: the cancellation is checked whatever brought it
          (its task, or Pub/Sub redelivering the original push): one read.
          The first to find it cancelled ends it (`skipped`, with the
          operator and reason); any later copy is answered `cancelled`,
          logged as a duplicate, and logs that `skipped` line again
          (`end_cancelled`).
        """
        e, due = parsed.event, parsed.deliver_at_us
        assert due is not None and self.core.scheduled is not None
        if due > arrived + ENTER_AT_ONCE_MS * 1000:
            hop, task = self.core.scheduled.hold(parsed.room_id, e.message_id, body, due, arrived, again=scheduled_entry)
            self.core.store.record_scheduled(e.message_id, parsed.room_id, due, hop, task)
            self.core.events.emit(DeliveryEvent(EventType.SCHEDULED, utc_iso(arrived), "enqueue", parsed.room_id,
                                           message_id=e.message_id, provider=e.provider,
                                           reason=f"enters its room at {utc_iso(due)}"
                                                  + (f" (next hop {utc_iso(hop)})" if hop < due else "")))
            return Reply(200, {"result": "scheduled", "deliver_at": utc_iso(due)})
        verdict = self.end_cancelled(parsed.room_id, e.message_id, e.provider, arrived, "enqueue")
        if verdict == "not_cancelled":
            return None
        if verdict != "ended_now":
            self.core.events.emit(DeliveryEvent(EventType.DUPLICATE_IGNORED, utc_iso(arrived), "enqueue", parsed.room_id,
                                           message_id=e.message_id, provider=e.provider,
                                           reason="a cancelled scheduled message that has ended already"))
        return Reply(200, {"result": "cancelled"})

    def end_cancelled(self, room_id: str, message_id: str, provider: str | None, at_us: int, component: str) -> str:
        """End room `room_id`'s cancelled scheduled message `message_id` as
        `skipped` (with the operator and reason of its cancellation), unsent,
        unless it has ended already: one conditional write
        (`claim_cancelled_end`). Called when a copy of it comes at its time,
        and by the cancel itself (shared/admin/queues.py), whose deleted task
        would otherwise leave nothing to bring it. `at_us`: epoch us of the
        end. Returns the claim's verdict: `ended_now` (this call ended it),
        `not_cancelled`, or `ended_before`. Raises what the store raises.

        The `skipped` line and the outcome go out after the claim, so a
        process that dies between the two would lose them: every call that
        finds the message ended (`ended_before`: a task run again, a push
        redelivered, the task a cancel that died before deleting it left)
        logs the line again, `relogged`, with the same `event_id`
        (`cancelled.{message_id}`: readers of the log keep one line per room
        and event id, docs/event-log.md), and publishes the outcome again
        (outcomes are at least once). Simulation seed 13 (2026-11-28): a copy
        died after its claim, and the cancelled message never ended in the log."""
        verdict, cancel = self.core.store.claim_cancelled_end(room_id, message_id)
        if verdict == "not_cancelled" or cancel is None:
            return "not_cancelled"
        # Ends unsent, as an operator's skip does.
        ended = DeliveryEvent(EventType.SKIPPED, utc_iso(at_us), component, room_id,
                              message_id=message_id, provider=provider, actor=cancel.get("actor"),
                              reason=f"{CANCELLED_REASON} before its time: {cancel.get('reason')}"[:300],
                              event_id=f"cancelled.{message_id}", relogged=True if verdict != "ended_now" else None)
        self.core.events.emit(ended)
        if self.core.outcomes is not None and (record := outcome_record(ended)) is not None:
            self.core.outcomes.publish([record])
        return verdict
