"""The hand-over's send goes before its ack timer is armed (issue 46, item 2).

An ack commits the room's hand-over; the next message's send call then
waits for nothing but the send itself: its timer task is created after the
call (shared/service/core.py, "Send, then arm"). A Cloud Tasks call that is
slow (or a retried arm) no longer delays, or past SEND_START_DEADLINE_MS
cancels, the next send. The room keeps a live wake-up (DESIGN.md invariant
8) when the arm fails, when the send's outcome cannot be recorded, and when
the process dies between the send and the arm: each scenario below runs in
the fault harness, which checks every invariant after every step.

All times in the simulated clock's epoch microseconds (tests/fakes.py).
"""

from __future__ import annotations

from shared.events import EventType
from shared.room import Phase, make_delivery_id
from shared.service import TRANSIENT_ERRORS, DeliveryService
from tests.unit.service.test_faults import (
    SEND_START_DEADLINE_MS,
    Knobs,
    WatchdogMachine,
    World,
    build_service,
    push_body,
    replay,
    status_body,
)

ROOM = "room-h"


def two_queued(world: World) -> DeliveryService:
    """A service whose room `ROOM` has m1 in flight (sent, accepted) and m2 queued."""
    service = build_service(world)
    for n in (1, 2):
        body = push_body(ROOM, f"m{n}", "15550001", f"message {n}", f"p{n}", world.clock.now_us())
        assert service.handle_push(body).status == 200
    assert [(c.seq, c.attempt) for c in world.platform.calls] == [(1, 1)]
    return service


def ack_m1(world: World, service: DeliveryService) -> int:
    """Post m1's `delivered` webhook; returns its HTTP status (503 for what
    the entry point answers 503: `TRANSIENT_ERRORS`)."""
    first = world.platform.calls[0]
    incarnation = world.store.load_room(ROOM).incarnation
    raw, sig = status_body([(make_delivery_id(ROOM, incarnation, 1, 1, first.decided_us), "wamid.1", "delivered")],
                           world.clock.now_us())
    try:
        return service.handle_status_webhook(raw, sig).status
    except TRANSIENT_ERRORS:
        return 503


def test_a_slow_timer_arm_does_not_delay_the_next_send():
    """The hand-over's Cloud Tasks call takes 1.5 s: m2's send starts when
    the ack is decided, not 1.5 s later (on the code before: 1.5 s later)."""
    world = World(Knobs())
    service = two_queued(world)
    world.clock.advance_ms(100)
    world.timers.slow_next_arm(1500)
    acked_at = world.clock.now_us()
    assert ack_m1(world, service) == 200
    m2 = world.platform.calls[1]
    assert (m2.seq, m2.attempt) == (2, 1)
    assert m2.started_us == acked_at
    # Its timer was armed after the call, due as the decision fixed it (not later for being armed later).
    task = next(t for t in world.timers.tasks if (t.timer.seq, t.timer.attempt) == (2, 1))
    assert task.armed_at_us >= m2.returned_us
    assert task.due_at_us == world.store.load_room(ROOM).in_flight.due_at_us


def test_an_arm_slower_than_the_start_deadline_still_lets_the_send_go():
    """On the code before, an arm slower than SEND_START_DEADLINE_MS made the
    send a refused one (not started in time) and the room backed off."""
    world = World(Knobs())
    service = two_queued(world)
    world.timers.slow_next_arm(SEND_START_DEADLINE_MS + 500)
    assert ack_m1(world, service) == 200
    assert [(c.seq, c.attempt, c.seen) for c in world.platform.calls][1] == (2, 1, "accepted")
    assert not any(e.event == EventType.SEND_FAILED for e in world.events.events)


def test_an_arm_that_fails_after_the_send_answers_503_and_the_retry_rearms():
    """The send was made; the arm fails 3 times: 503, nothing sent twice,
    and Meta's retry of the webhook re-arms m2's timer (same task name)."""
    world = World(Knobs())
    service = two_queued(world)
    world.timers.fail_next_arm(skip=0, times=3)
    assert ack_m1(world, service) == 503
    assert [(c.seq, c.attempt) for c in world.platform.calls] == [(1, 1), (2, 1)]
    assert not [t for t in world.timers.tasks if t.timer.seq == 2]
    assert ack_m1(world, service) == 200  # Meta's retry
    assert [(c.seq, c.attempt) for c in world.platform.calls] == [(1, 1), (2, 1)]
    assert [(t.timer.seq, t.timer.attempt) for t in world.timers.tasks if t.timer.seq == 2] == [(2, 1)]


def test_a_send_whose_outcome_cannot_be_recorded_still_has_its_timer():
    """m2's send is refused and the transaction of that outcome fails: the
    webhook answers 503, and m2's timer is armed all the same (as when the
    arm came before the send), carrying no acceptance. (An accepted
    WhatsApp send has no write of its own to fail since issue 46.)"""
    world = World(Knobs())
    service = two_queued(world)
    world.platform.fail_next_send("transient")
    world.platform.during_next_send(lambda _call: world.store.fail_next_commit())
    assert ack_m1(world, service) == 503
    timers = [t.timer for t in world.timers.tasks if t.timer.seq == 2]
    assert [(t.seq, t.attempt, t.accepted_deadline_us) for t in timers] == [(2, 1, None)]


def test_harness_crash_between_the_send_and_the_arm_meta_retries():
    """The process dies after m2's send, before its arm; Meta posts the ack
    again: the redelivery re-arms m2's timer; every invariant holds."""
    state = replay(WatchdogMachine, """
        state.publish(room='room-0')
        state.publish(room='room-0')
        state.crash_at_next(point='before_arm')
        state.status_webhook(pick=0, status='delivered')
        state.meta_retries(pick=0)
        state.advance_clock(ms=4000)
        state.advance_clock(ms=4000)
    """)
    sent = [(c.seq, c.attempt) for c in state.world.platform.calls if c.room_id == "room-0"]
    assert sent[:2] == [(1, 1), (2, 1)]


def test_harness_crash_between_the_send_and_the_arm_only_the_watchdog():
    """The process dies after m2's send, before its arm, and nothing
    redelivers: the watchdog's sweep finds the room after its due time plus
    the grace period; every invariant holds."""
    state = replay(WatchdogMachine, """
        state.publish(room='room-0')
        state.publish(room='room-0')
        state.crash_at_next(point='before_arm')
        state.status_webhook(pick=0, status='delivered')
        state.advance_clock(ms=4000)
        state.advance_clock(ms=4000)
        state.watchdog_sweep()
        state.advance_clock(ms=4000)
        state.watchdog_sweep()
    """)
    calls = [(c.seq, c.attempt) for c in state.world.platform.calls if c.room_id == "room-0"]
    assert calls[:2] == [(1, 1), (2, 1)]
    assert any(e.event == EventType.WATCHDOG_RESCUED for e in state.world.events.events)


def test_an_arm_that_fails_after_an_accepted_send_writes_the_acceptance_into_the_room():
    """The timer that was to carry m2's acceptance could not be armed: the
    acceptance is written into the room instead (`record_accepted`), so a
    watchdog's wake-up of m2 before Meta's retry re-arms its timer times it
    out rather than resending a message the platform took (on the code
    before: m2 stayed SENDING with no acceptance; `make chaos`, direct,
    2026-11-28: 56 of 98 duplicates followed a failed arm)."""
    world = World(Knobs())
    service = two_queued(world)
    world.timers.fail_next_arm(skip=0, times=3)
    assert ack_m1(world, service) == 503
    room = next(iter(world.store.docs))
    flight = world.store.load_room(room).in_flight
    assert (flight.message.seq, flight.phase) == (2, Phase.SENT)
    assert flight.deadline_us == world.platform.calls[-1].returned_us + world.policy.ack_timeout_ms * 1000
