"""A status that waited in the status queue is decided at the time it is
applied, not at its receive time (issue 28, item 4): otherwise the next
message's send is decided in the past and the service refuses its own send
(`send not started within SEND_START_DEADLINE_MS`). The receive time stays
the ack latency's end."""

from __future__ import annotations

from shared.room import Enqueue, decide
from shared.status_queue import QueuedStatus, RoomStatuses
from tests.unit.service.test_status_queue import World

QUEUE_WAIT_MS = 5000  # a backlog, or a `status` outage being worked off


def test_a_status_that_waited_in_the_queue_passes_the_baton_to_a_send_that_goes_out():
    w = World()
    delivery = w.room_in_flight("room-a")
    now = w.clock.now_us()
    w.store.apply("room-a", lambda s: decide(s, Enqueue("m2", "whatsapp", "15550001", "two", now, now),
                                             w.policy, "test"))
    received = w.clock.now_us()
    batch = RoomStatuses("room-a", received, (QueuedStatus(delivery, "delivered"),))
    w.clock.advance_ms(QUEUE_WAIT_MS)
    assert w.service.handle_status_push(w.push_of(batch)).body["applied"] == 1
    events = w.events.events
    assert [e.event for e in events if e.event in ("sent", "send_failed")] == ["sent"], \
        [(e.event, e.reason) for e in events]
    acked = next(e for e in events if e.event == "acked")
    assert acked.send_to_ack_ms < QUEUE_WAIT_MS  # measured to the receive time, not to the decision
    assert acked.ts == events[-1].ts  # decided now
