"""Producer sequence: a room holds a message until its producer predecessors
came, or the gap timeout passed (shared/room/entry.py). Pure rules, no I/O; the
emulator test is in tests/integration/test_prepare.py."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.room import (
    Enqueue,
    Policy,
    RoomState,
    ScheduleTimer,
    Send,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
)
from shared.room_document import room_as_read, room_to_doc
from tests.unit.room.steps import stepper

POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, sequence_gap_timeout_ms=5000,
                watchdog_grace_ms=60_000)
T0 = 1_700_000_000_000_000
MS = 1000


def push(mid: str, sequence: int | None, at: int = T0) -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", "hi", at - 5 * MS, at, sequence=sequence)


step = stepper(POLICY)


def sent(d) -> list[str]:
    return [e.message.message_id for e in d.effects if isinstance(e, Send)]


def gap_timers(d) -> list[int]:
    return [e.due_at_us for e in d.effects if isinstance(e, ScheduleTimer) and e.seq == 0]


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def ack(state: RoomState, at: int) -> StatusUpdate:
    f = state.in_flight
    return StatusUpdate(state.incarnation, f.message.seq, f.attempt, "delivered", T0, at)


def test_a_message_ahead_of_its_predecessor_waits_for_it_then_both_go_in_producer_order():
    state, d = step(RoomState("r1"), push("b", 2))
    assert sent(d) == [] and kinds(d) == ["sequence_held"] and gap_timers(d) == [T0 + 5000 * MS]
    assert state.wake_at_us == T0 + 5000 * MS and state.holds_messages
    state, d = step(state, push("a", 1, at=T0 + 100 * MS))
    assert sent(d) == ["a"] and [m.message_id for m in state.pending] == ["b"]
    assert [e.seq for e in d.events if str(e.event) == "enqueued"] == [1, 2] and state.gap_due_us is None
    state, d = step(state, ack(state, T0 + 200 * MS))
    assert sent(d) == ["b"]


def test_past_the_gap_timeout_the_gap_is_logged_and_the_room_moves_on_and_a_late_one_goes_last():
    state, _ = step(RoomState("r1"), push("a", 1))
    state, d = step(state, push("c", 3, at=T0 + 10 * MS))
    state, d = step(state, push("d", 4, at=T0 + 20 * MS))
    due = state.gap_due_us
    early = TimerFired(state.incarnation, 0, 0, due, due - 1000 * MS)
    state, d = step(state, early)
    assert kinds(d) == [] and gap_timers(d) == [due]  # too early: armed again
    state, d = step(state, TimerFired(state.incarnation, 0, 0, due, due))
    assert kinds(d)[0] == "sequence_gap" and "producer sequence 2 missing" in d.events[0].reason
    assert [m.message_id for m in state.pending] == ["c", "d"] and state.sequence_held == ()
    state, d = step(state, push("b", 2, at=due + 10 * MS))
    assert "after its gap was given up" in d.events[0].reason
    order = []
    for k in range(3):
        state, d = step(state, ack(state, due + (100 + k) * MS))
        order += sent(d)
    assert order == ["c", "d", "b"]


def test_a_held_message_pushed_again_is_a_duplicate():
    state, _ = step(RoomState("r1"), push("b", 2))
    _, d = step(state, push("b", 2, at=T0 + MS))
    assert kinds(d) == ["duplicate_ignored"] and d.state is None


def test_messages_without_a_sequence_are_not_held():
    state, _ = step(RoomState("r1"), push("b", 2))
    state, d = step(state, push("x", None, at=T0 + MS))
    assert sent(d) == ["x"]


def test_the_watchdog_gives_an_overdue_gap_up_when_its_timer_was_lost():
    state, _ = step(RoomState("r1"), push("b", 3))
    _, d = step(state, WatchdogSweep(T0 + 30_000 * MS))
    assert d.state is None  # not overdue by the grace period yet
    state, d = step(state, WatchdogSweep(T0 + 66_000 * MS))
    assert kinds(d)[:2] == ["watchdog_rescued", "sequence_gap"] and sent(d) == ["b"]
    assert d.events[0].reason == "sequence gap, overdue 61000 ms"  # the gap was due at T0 + 5 s


def test_held_messages_round_trip_through_the_room_document():
    state, _ = step(RoomState("r1"), push("a", 1))
    state, _ = step(state, push("c", 3))
    assert room_as_read("r1", room_to_doc(state), 0) == state and room_to_doc(state)["wake_at_us"] == state.wake_at_us


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 10))
def test_any_arrival_order_within_the_gap_timeout_sends_in_producer_order(seed, n):
    rng = random.Random(seed)
    arrivals = list(range(1, n + 1))
    rng.shuffle(arrivals)
    state, order, now = RoomState("r1"), [], T0
    for s in arrivals:
        now += MS
        state, d = step(state, push(f"m{s}", s, at=now))
        order += sent(d)
        while state.in_flight is not None and rng.random() < 0.5:
            now += MS
            state, d = step(state, ack(state, now))
            order += sent(d)
    while state.in_flight is not None:
        now += MS
        state, d = step(state, ack(state, now))
        order += sent(d)
    assert order == [f"m{s}" for s in range(1, n + 1)]
    assert state.sequence_held == () and state.pending == ()
