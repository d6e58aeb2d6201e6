"""A WhatsApp send's acceptance carried by its attempt's timer (issue 46):
`TimerFired.accepted_deadline_us` makes a SENDING attempt SENT, held to
that deadline, as a recorded acceptance does (facts.py), then wakes it as
SENT; committed, so the later timer finds SENT. A superseded timer of the
attempt still records it. Pure: no I/O."""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room import (
    Enqueue,
    Phase,
    RoomState,
    ScheduleTimer,
    Skip,
    StatusUpdate,
    TimerFired,
)
from tests.unit.room.steps import POLICY, stepper

step = stepper(POLICY)
T0 = 1_700_000_000_000_000
MS = 1000
RETURNED = T0 + 400 * MS  # the send returned accepted
DEADLINE = RETURNED + POLICY.ack_timeout_ms * 1000  # ack_deadline_us(POLICY, RETURNED)


def sending() -> RoomState:
    room, _ = step(RoomState("r"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0))
    assert room.in_flight.phase is Phase.SENDING
    return room


def fired(room: RoomState, at_us: int, accepted: int | None = DEADLINE, due: int | None = None) -> TimerFired:
    flight = room.in_flight
    return TimerFired(room.incarnation, flight.message.seq, flight.attempt,
                      flight.due_at_us if due is None else due, at_us, accepted)


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def test_a_timer_carrying_the_acceptance_before_the_deadline_records_it_and_waits_for_the_deadline():
    room = sending()
    due = room.in_flight.due_at_us  # first timer: ack timeout + slack after the start
    assert due < DEADLINE
    after, d = step(room, fired(room, due))
    assert after.in_flight.phase is Phase.SENT and after.in_flight.deadline_us == DEADLINE
    assert after.in_flight.due_at_us == DEADLINE
    assert [e for e in d.effects if isinstance(e, ScheduleTimer)] == [
        ScheduleTimer("r", room.incarnation, 1, 1, DEADLINE)]  # the rule never sets an acceptance itself
    assert kinds(d) == ["timer_rearmed"]
    # The re-armed timer carries none: it finds SENT (committed) and times out, not resends.
    ended, d2 = step(after, fired(after, DEADLINE, accepted=None))
    assert ended.in_flight is None and ended.counts == {"timed_out": 1}
    assert "resent" not in kinds(d2)


def test_a_timer_carrying_the_acceptance_past_the_deadline_times_out_at_once():
    room = sending()
    late = DEADLINE + 10 * MS
    after, d = step(room, fired(room, late, accepted=DEADLINE))
    assert after.counts == {"timed_out": 1} and after.in_flight is None
    assert "resent" not in kinds(d)


def test_the_same_timer_without_the_acceptance_holds_then_resends_as_possibly_sent():
    """The contrast (an arm that lost the acceptance, or a body older code
    wrote): SENDING, held to its hold time, then resent."""
    room = sending()
    after, _ = step(room, fired(room, room.in_flight.due_at_us, accepted=None))
    assert after.in_flight.phase is Phase.SENDING
    hold = after.in_flight.due_at_us
    resent, d = step(after, fired(after, hold, accepted=None))
    assert resent.in_flight.attempt == 2 and "resent" in kinds(d)


def test_a_duplicate_of_the_timer_carrying_the_acceptance_changes_nothing_more():
    room = sending()
    event = fired(room, room.in_flight.due_at_us)
    after, _ = step(room, event)
    again, d = step(after, event)
    assert again == after and d.state is None
    assert [e.reason for e in d.events] == ["superseded_timer"]


def test_a_superseded_timer_still_records_the_acceptance_of_its_sending_attempt():
    """Another decision moved the attempt's wake-up later (here a skip whose
    send window outlasts the first timer): the earlier timer, the one that
    carries the acceptance, is ignored but its acceptance is kept, so the
    later timer (which carries none) finds the attempt SENT."""
    policy = replace(POLICY, send_timeout_ms=5000)  # send window 6 s > first timer 3.25 s
    room, _ = step(RoomState("r"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0), policy)
    first_due = room.in_flight.due_at_us
    skipped, _ = step(room, Skip(1, "ops", "test", T0 + 100 * MS), policy)
    assert skipped.in_flight.due_at_us > first_due and skipped.in_flight.phase is Phase.SENDING
    after, d = step(skipped, fired(room, first_due), policy)
    assert [e.reason for e in d.events] == ["superseded_timer"]
    assert after == replace(skipped, in_flight=replace(skipped.in_flight, phase=Phase.SENT, deadline_us=DEADLINE))
    assert not [e for e in d.effects if isinstance(e, ScheduleTimer)]


def test_a_superseded_timer_whose_later_timer_would_resend_keeps_the_acceptance_so_it_times_out():
    """The case the acceptance of a superseded timer is for: a later wake-up
    of the same SENDING attempt (built here by moving its due time) that
    carries none times out instead of resending an accepted message."""
    room = sending()
    first_due = room.in_flight.due_at_us
    hold = room.in_flight.started_at_us + (POLICY.send_window_ms + POLICY.ack_timeout_ms) * 1000
    moved = replace(room, in_flight=replace(room.in_flight, due_at_us=max(hold, DEADLINE) + 1))
    after, _ = step(moved, fired(room, first_due))
    assert after.in_flight.phase is Phase.SENT
    ended, d = step(after, fired(after, after.in_flight.due_at_us, accepted=None))
    assert ended.counts == {"timed_out": 1} and "resent" not in kinds(d)


def test_an_acceptance_on_the_timer_of_another_attempt_or_a_sent_one_changes_nothing():
    room = sending()
    other = fired(room, room.in_flight.due_at_us)
    after, d = step(room, replace(other, attempt=2))
    assert after == room and [e.reason for e in d.events] == ["not_in_flight"]
    sent = replace(room, in_flight=replace(room.in_flight, phase=Phase.SENT, deadline_us=DEADLINE + 5 * MS))
    after, _ = step(sent, other)
    assert after.in_flight.deadline_us == DEADLINE + 5 * MS  # the recorded outcome stands


def test_an_ack_ends_the_attempt_before_its_timer_brings_the_acceptance():
    room = sending()
    acked, _ = step(room, StatusUpdate(room.incarnation, 1, 1, "delivered", T0 + 500 * MS, T0 + 500 * MS))
    assert acked.counts == {"acked": 1}
    after, d = step(acked, fired(room, room.in_flight.due_at_us))
    assert after == acked and kinds(d) == [str(EventType.TIMEOUT_IGNORED)]
