"""A timeout fires at its deadline (issue 31, item 1): the first timer is due
at the earliest the ack deadline can be (decision + ACK_TIMEOUT_MS), and a
timer that comes before the deadline (the send returned later) arms one for
the rest; the message is still held ACK_TIMEOUT_MS after its send returned."""

from __future__ import annotations

from shared.room import (
    Enqueue,
    Policy,
    RoomState,
    ScheduleTimer,
    SendOutcome,
    SendReturned,
    TimerFired,
    decide,
)
from shared.tasks import task_id

T0 = 1_700_000_000_000_000
MS = 1000
POLICY = Policy(ack_timeout_ms=3000)  # FIRST_TIMER_SLACK_MS's default: 0


def test_the_first_timer_is_due_at_decision_plus_the_ack_timeout_with_no_slack():
    d = decide(RoomState("r"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0), POLICY, "t")
    assert [e.due_at_us for e in d.effects if isinstance(e, ScheduleTimer)] == [T0 + 3000 * MS]


def test_a_timer_before_the_deadline_rearms_for_the_rest_and_the_message_times_out_at_its_deadline():
    state = decide(RoomState("r"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0), POLICY, "t").state
    returned = T0 + 45 * MS  # the send call took 45 ms
    state = decide(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, returned, "c"), POLICY, "t").state
    first = T0 + 3000 * MS
    d = decide(state, TimerFired(state.incarnation, 1, 1, first, first + 10 * MS), POLICY, "t")
    assert [e.due_at_us for e in d.effects if isinstance(e, ScheduleTimer)] == [returned + 3000 * MS]
    assert [str(e.event) for e in d.events] == ["timer_rearmed"]
    state = d.state
    d = decide(state, TimerFired(state.incarnation, 1, 1, returned + 3000 * MS, returned + 3000 * MS), POLICY, "t")
    assert [str(e.event) for e in d.events] == ["timed_out"]


def test_a_timer_delivered_early_is_armed_again_under_a_new_name():
    """Cloud Tasks' clock may run ahead of the function's: a timer comes
    300 us before its due time, and the rule waits for the rest. The wait
    is due in the next ms, so its task name (`task_id`: attempt and due ms)
    is not the running task's, which Cloud Tasks would refuse as a
    duplicate for about an hour (the room then waits for the watchdog)."""
    state = decide(RoomState("r"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0), POLICY, "t").state
    returned = T0 + 45 * MS
    state = decide(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, returned, "c"), POLICY, "t").state
    first = T0 + 3000 * MS
    state = decide(state, TimerFired(state.incarnation, 1, 1, first, first), POLICY, "t").state
    deadline = returned + 3000 * MS
    assert state.in_flight.due_at_us == deadline  # re-armed for the rest of its hold
    firing = ScheduleTimer("r", state.incarnation, 1, 1, deadline)
    d = decide(state, TimerFired(state.incarnation, 1, 1, deadline, deadline - 300), POLICY, "t")
    [again] = [e for e in d.effects if isinstance(e, ScheduleTimer)]
    assert task_id(again) != task_id(firing)
    assert again.due_at_us == (deadline // MS + 1) * MS
    d = decide(d.state, TimerFired(state.incarnation, 1, 1, again.due_at_us, again.due_at_us), POLICY, "t")
    assert [str(e.event) for e in d.events] == ["timed_out"]
