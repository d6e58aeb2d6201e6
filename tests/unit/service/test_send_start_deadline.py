"""A send starts by its start deadline, checked again after the sender
window's slot take (issue 43, bug 1; DESIGN.md invariant 11).

The slot take reads and writes Firestore (with the client's retries); a
take slow enough for the room to hand over meanwhile must not be followed
by the call: the platform would take a copy of m1 after m2."""

from __future__ import annotations

from collections.abc import Callable

from shared.room import make_delivery_id
from shared.sender_window import SlotTaken
from shared.service import DeliveryService, ServiceCore
from tests.unit.service.test_faults import (
    SEND_START_DEADLINE_MS,
    SEND_TIMEOUT_MS,
    Knobs,
    World,
    call_timer,
    push_body,
    seams,
    status_body,
)


class SlowWindow:
    """A sender window whose `slow_take`-th take (1-based) lasts `ms` of
    simulated time, running `meanwhile()` half-way; every take finds a slot."""

    def __init__(self, world: World, slow_take: int, ms: int) -> None:
        self.world, self.slow_take, self.ms = world, slow_take, ms
        self.takes = 0
        self.meanwhile: Callable[[], None] | None = None

    def take(self, number: str, rate: int, now_us: int) -> SlotTaken | None:
        self.takes += 1
        if self.takes == self.slow_take:
            self.world.clock.advance_ms(self.ms // 2)
            if self.meanwhile is not None:
                self.meanwhile()
            self.world.clock.advance_ms(self.ms - self.ms // 2)
        return None


def build(world: World, window: SlowWindow) -> DeliveryService:
    return DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers,
                                       {"whatsapp": world.platform}, world.events, sender_window=window, **seams(world)))  # type: ignore[arg-type]


def run_due_timers(world: World, service: DeliveryService) -> None:
    for task in world.timers.due():
        task.done = True
        call_timer(service, task)


def test_a_slot_take_past_the_start_deadline_makes_no_call():
    world = World(Knobs())
    window = SlowWindow(world, slow_take=1, ms=SEND_START_DEADLINE_MS + 500)
    service = build(world, window)
    assert service.handle_push(push_body("room-d", "m1", "15550001", "hi", "p1", world.clock.now_us())).status \
        == 200
    assert world.platform.calls == []  # too late to start: the room's rules decide (a refused send)
    assert any(e.event == "send_failed" and "SEND_START_DEADLINE_MS" in (e.error_title or "")
               for e in world.events.events)
    state = world.store.load_room("room-d")
    assert state.in_flight is not None and str(state.in_flight.phase) == "backoff"


def test_the_issue_reproduction_no_copy_of_m1_after_m2():
    """m1#1's outcome is unknown; its resend (m1#2) waits in a slot take;
    m1#1's `delivered` comes, the room hands over at decision + send window,
    m2 is sent; then m1#2's take returns. The platform must not take m1#2."""
    world = World(Knobs())
    window = SlowWindow(world, slow_take=2, ms=SEND_START_DEADLINE_MS + SEND_TIMEOUT_MS + 1000)
    service = build(world, window)
    room = "room-d"
    world.platform.fail_next_send("unknown_reached")
    assert service.handle_push(push_body(room, "m1", "15550001", "one", "p1", world.clock.now_us())).status \
        == 200
    assert service.handle_push(push_body(room, "m2", "15550001", "two", "p2", world.clock.now_us())).status \
        == 200
    first = world.platform.calls[0]
    incarnation = world.store.load_room(room).incarnation

    def meanwhile() -> None:
        # m1#1 reached the device; the room waits for the send window of m1#2, then hands over.
        raw, sig = status_body([(make_delivery_id(room, incarnation, 1, 1, first.decided_us), "wamid.1",
                                 "delivered")], world.clock.now_us())
        assert service.handle_status_webhook(raw, sig).status == 200
        world.clock.advance_ms(SEND_START_DEADLINE_MS + SEND_TIMEOUT_MS)
        run_due_timers(world, service)

    window.meanwhile = meanwhile
    # m1#1 held past its hold, no ack: its timer resends it (m1#2), whose take is slow.
    for _ in range(4):
        world.clock.advance_ms(2000)
        run_due_timers(world, service)
    taken = [(c.seq, c.attempt) for c in world.platform.reached_calls(room)]
    assert taken[:2] == [(1, 1), (2, 1)], taken
    assert (1, 2) not in [(c.seq, c.attempt) for c in world.platform.calls], taken
