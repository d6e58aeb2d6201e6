"""A status after an ack the same webhook instance applied (WEBHOOK_MODE=
direct; shared/service/webhook.py `_logged_after_own_ack`, the record of
shared/service/sent_proofs.py): it cannot change the room, so the webhook
logs the room's own `status_ignored` line (reason `after_acked`) without
reading or transacting the room. Only for that attempt's ack applied by
this instance, within ACK_MEMORY_US; anything else reads the room as
before (a `delivered` below the ack level acks nothing, so the `read`
after it must still reach the room and ack it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from shared.events import DeliveryEvent, EventType
from shared.room import Decision, RoomState, make_delivery_id
from shared.room.state import policy_from_settings
from shared.service import DeliveryService
from shared.service.core import ServiceCore
from shared.service.sent_proofs import ACK_MEMORY_US, SentProofRecord
from tests.unit.service.test_faults import Knobs, World, push_body, seams, status_body
from tools.sim.fakes import FakeRoomStore, SimClock

ROOM = "room-a"


class ReadCountingStore(FakeRoomStore):
    """The fake store, counting the reads of each room: a transaction's
    (`apply`) and a plain read (`read_room`)."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__(clock)
        self.reads: list[str] = []

    def apply(self, room_id: str, decide_fn: Callable[[RoomState], Decision]) -> Decision:
        self.reads.append(room_id)
        return super().apply(room_id, decide_fn)

    def read_room(self, room_id: str, deadline_s: float | None = None) -> RoomState | None:
        self.reads.append(room_id)
        return super().read_room(room_id, deadline_s)


def _world(ack_level: str = "delivered") -> tuple[World, ReadCountingStore, DeliveryService, str]:
    """A direct-mode world over the counting store, one message of ROOM
    sent (attempt 1): the world, the store, one webhook instance and the
    attempt's delivery id."""
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, ack_level_whatsapp=ack_level)
    world.policy = policy_from_settings(world.settings)
    store = world.store = ReadCountingStore(world.clock)
    service = _instance(world)
    assert service.handle_push(push_body(ROOM, "m1", "15550001", "hi", "p1", world.clock.now_us())).status == 200
    state = store.load_room(ROOM)
    assert state is not None and state.in_flight is not None
    return world, store, service, make_delivery_id(ROOM, state.incarnation, 1, 1, state.in_flight.started_at_us)


def _instance(world: World) -> DeliveryService:
    """One webhook instance: the world's store, timers, platform and log, its own memory."""
    return DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers,
                                       {"whatsapp": world.platform}, world.events,
                                       **seams(world)))  # type: ignore[arg-type]


def _post(world: World, service: DeliveryService, delivery_id: str, status: str) -> list[DeliveryEvent]:
    """Post one status of `delivery_id`; the lines it logged."""
    before = len(world.events.events)
    raw, signature = status_body([(delivery_id, "wamid.1", status)], world.clock.now_us())
    assert service.handle_status_webhook(raw, signature).status == 200
    return world.events.events[before:]


def test_a_read_after_the_ack_this_instance_applied_logs_the_rooms_line_without_a_read() -> None:
    world, store, service, delivery_id = _world()
    (acked,) = [e for e in _post(world, service, delivery_id, "delivered") if e.event is EventType.ACKED]
    assert acked.seq == 1 and store.reads[-1] == ROOM
    reads = len(store.reads)
    (line,) = _post(world, service, delivery_id, "read")
    assert len(store.reads) == reads  # neither a transaction nor a read of the room
    # The same line the room logs for it: another instance, which did not apply the ack, reads the room.
    (from_room,) = _post(world, _instance(world), delivery_id, "read")
    assert len(store.reads) == reads + 1
    assert line == from_room and line.event is EventType.STATUS_IGNORED and line.reason == "after_acked"
    assert line.to_record() == from_room.to_record()
    # A duplicate of the ack itself is answered the same way.
    reads = len(store.reads)
    assert [e.reason for e in _post(world, service, delivery_id, "delivered")] == ["after_acked"]
    assert len(store.reads) == reads


def test_a_delivered_that_acked_nothing_is_no_applied_ack_and_the_read_after_it_acks() -> None:
    """ACK_LEVEL_WHATSAPP=read: the `delivered` is ignored (below the ack
    level); the `read` after it must reach the room and ack the message."""
    world, store, service, delivery_id = _world(ack_level="read")
    assert [e.reason for e in _post(world, service, delivery_id, "delivered")] == ["below_ack_level"]
    reads = len(store.reads)
    assert [e.event for e in _post(world, service, delivery_id, "read")] == [EventType.ACKED]
    assert len(store.reads) > reads


def test_after_the_memory_or_for_another_attempt_the_room_is_read() -> None:
    world, store, service, delivery_id = _world()
    _post(world, service, delivery_id, "delivered")
    state = store.load_room(ROOM)
    assert state is not None
    other_attempt = make_delivery_id(ROOM, state.incarnation, 1, 2, world.clock.now_us())
    reads = len(store.reads)
    assert [e.reason for e in _post(world, service, other_attempt, "read")] == ["after_acked"]
    assert len(store.reads) == reads + 1
    world.clock.advance_ms(ACK_MEMORY_US // 1000)
    assert [e.reason for e in _post(world, service, delivery_id, "read")] == ["after_acked"]
    assert len(store.reads) == reads + 2


def test_the_record_of_applied_acks_is_bounded_and_timed() -> None:
    record = SentProofRecord(max_entries=2)
    a, b, c = (("r", 1, 1, 1), ("r", 1, 2, 1), ("r", 1, 3, 1))
    record.acks_applied([a, b, c], frozenset({a[:3], b[:3]}), 100)  # c's message was not acked here
    assert record.applied_ack(a, 100) and record.applied_ack(b, 100 + ACK_MEMORY_US - 1)
    assert not record.applied_ack(c, 100) and not record.applied_ack(a, 100 + ACK_MEMORY_US)
    record.ack_applied(c, 200)
    assert not record.applied_ack(a, 200) and record.applied_ack(c, 200)  # the oldest went first

