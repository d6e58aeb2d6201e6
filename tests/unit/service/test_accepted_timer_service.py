"""A WhatsApp send's acceptance carried by its attempt's timer, not a
blind write of the room (issue 46), through the service: no Firestore
write outside the room's transactions, and the fault paths (a crash
between the send and the arm, the timer firing before the deadline, a
duplicate of the timer task). The arm that fails after the send:
tests/unit/service/test_sent_proof_service.py
(`test_a_sent_status_while_the_send_has_no_recorded_outcome_makes_it_time_out_not_resend`)."""

from __future__ import annotations

import json

import pytest

from shared.opcounts import begin_request
from shared.room import Enqueue, Phase
from shared.senders import rendezvous_sender
from shared.service.core import ServiceCore
from shared.store import RoomStore
from tests.fakes import Crash, FakePlatform, FakeTimers, RecordingEventLog, SimClock
from tests.unit.repo.test_counted_calls import POLICY, SETTINGS, Client
from tests.unit.service.test_faults import push_body, timer_body
from tests.unit.service.test_sender_service import NUMBERS, three_numbers
from tests.unit.service.test_sent_proof_service import another_instance, post, statuses

ROOM = "room-t"


def test_an_accepted_whatsapp_send_writes_the_room_once_its_transaction_and_its_timer_carries_the_acceptance():
    """On the code before: two writes (the transaction, then the blind
    `accepted.{key}` write of `RoomStore.record_accepted`)."""
    clock = SimClock()
    platform = FakePlatform(clock, budget_ms=2_000)
    timers = FakeTimers(clock)
    core = ServiceCore(SETTINGS, POLICY, RoomStore(Client(), retention_hours=1), timers,  # type: ignore[arg-type]
                       {"whatsapp": platform}, RecordingEventLog(clock), clock=clock)
    counts = begin_request()
    core.apply("r1", Enqueue("m1", "whatsapp", "15550001", "hi", clock.now_us(), clock.now_us()), "enqueue")
    assert [c.seen for c in platform.calls] == ["accepted"]
    assert (counts.firestore_reads, counts.firestore_writes, counts.tasks_created) == (1, 1, 0)
    (task,) = timers.tasks
    assert task.timer.accepted_deadline_us == platform.calls[0].returned_us + POLICY.ack_timeout_ms * 1000
    assert json.loads(json.dumps(timer_body(task.timer)))["accepted_deadline_us"] == task.timer.accepted_deadline_us
    assert core.store.read_room("r1").in_flight.phase is Phase.SENDING  # until its timer fires


def pushed(crash_arm: bool = False):
    """A service whose room ROOM's m1 was sent, accepted 300 ms after its
    start (`crash_arm`: the process dies arming its timer)."""
    world, service, platforms = three_numbers()
    platforms[rendezvous_sender(ROOM, NUMBERS)].slow_next_send(300, reach="start")
    if crash_arm:
        world.timers.crash_next_arm()
        with pytest.raises(Crash):
            service.handle_push(push_body(ROOM, "m1", "15550001", "hi", "p1", world.clock.now_us()))
    else:
        assert service.handle_push(push_body(ROOM, "m1", "15550001", "hi", "p1", world.clock.now_us())).status == 200
    number = rendezvous_sender(ROOM, NUMBERS)
    return world, service, platforms[number], number


def run_due_timers(world, service) -> int:
    ran = 0
    for task in world.timers.due():
        assert service.handle_timer(json.dumps(timer_body(task.timer)).encode()).status == 200
        task.done = True
        ran += 1
    return ran


def test_a_crash_between_the_send_and_the_arm_leaves_the_watchdog_and_the_sent_proof_to_time_it_out():
    """No timer: the acceptance died with the process. Another instance
    gets the `sent` status (nothing settled it there): its echo. The
    watchdog's sweep finds the attempt SENDING past its hold time, proven
    taken: timed out, not resent."""
    world, service, platform, number = pushed(crash_arm=True)
    assert not world.timers.tasks
    state = world.store.load_room(ROOM)
    assert state.in_flight.phase is Phase.SENDING
    other = another_instance(service)
    delivery_id = platform.calls[0].delivery_id
    assert post(world, other, statuses((delivery_id, "sent", number))) == 200
    assert world.store.load_room(ROOM).in_flight.platform_ts_us is not None
    world.clock.advance_to_us(state.in_flight.due_at_us + world.settings.watchdog_grace_ms * 1000 + 1000)
    assert other.handle_sweep().status == 200
    assert world.store.load_room(ROOM).counts == {"timed_out": 1}
    assert len(platform.calls) == 1  # not sent a second time


def test_the_timer_carrying_the_acceptance_before_the_deadline_commits_sent_and_rearms_to_the_deadline():
    world, service, platform, _ = pushed()
    (task,) = world.timers.tasks
    deadline = task.timer.accepted_deadline_us
    assert deadline is not None and task.due_at_us < deadline
    world.clock.advance_to_us(task.due_at_us)
    assert run_due_timers(world, service) == 1
    flight = world.store.load_room(ROOM).in_flight
    assert (flight.phase, flight.deadline_us, flight.due_at_us) == (Phase.SENT, deadline, deadline)
    rearmed = [t for t in world.timers.tasks if t is not task]
    assert [(t.due_at_us, t.timer.accepted_deadline_us) for t in rearmed] == [(deadline, None)]
    world.clock.advance_to_us(deadline)
    assert run_due_timers(world, service) == 1
    assert world.store.load_room(ROOM).counts == {"timed_out": 1}
    assert len(platform.calls) == 1


def test_a_duplicate_delivery_of_the_timer_task_changes_nothing_more():
    world, service, platform, _ = pushed()
    (task,) = world.timers.tasks
    world.clock.advance_to_us(task.due_at_us)
    body = json.dumps(timer_body(task.timer)).encode()
    assert service.handle_timer(body).status == 200
    after = dict(world.store.docs[ROOM])
    version = world.store.versions[ROOM]
    assert service.handle_timer(body).status == 200
    assert another_instance(service).handle_timer(body).status == 200
    assert world.store.versions[ROOM] == version and world.store.docs[ROOM] == after
    assert world.store.load_room(ROOM).in_flight.phase is Phase.SENT
    assert len(platform.calls) == 1


def test_a_timer_body_older_code_wrote_still_parses_and_wakes_the_attempt_as_sending():
    world, service, platform, _ = pushed()
    (task,) = world.timers.tasks
    body = timer_body(task.timer)
    del body["accepted_deadline_us"]
    world.clock.advance_to_us(task.due_at_us)
    assert service.handle_timer(json.dumps(body).encode()).body == {"result": "ok"}
    assert world.store.load_room(ROOM).in_flight.phase is Phase.SENDING  # held to its hold time


def test_a_send_whose_decision_arms_no_timer_of_its_attempt_falls_back_to_the_blind_write():
    """No decision does so today (`start` arms, then sends): rules that did
    would still have the acceptance recorded, by `RoomStore.record_accepted`."""
    import dataclasses

    from shared.room import ScheduleTimer, decide
    from shared.service import DeliveryService
    from tests.unit.service.test_faults import Knobs, World, seams

    def no_timers(state, event, policy, component):
        d = decide(state, event, policy, component)
        return dataclasses.replace(d, effects=tuple(e for e in d.effects if not isinstance(e, ScheduleTimer)))

    world = World(Knobs())
    service = DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers,
                                          {"whatsapp": world.platform}, world.events,
                                          **{**seams(world), "decide": no_timers}))
    assert service.handle_push(push_body(ROOM, "m1", "15550001", "hi", "p1", world.clock.now_us())).status == 200
    assert not world.timers.tasks
    assert list(world.store.docs[ROOM]["accepted"].values()) == [
        world.platform.calls[0].returned_us + world.policy.ack_timeout_ms * 1000]
    assert world.store.load_room(ROOM).in_flight.phase is Phase.SENT
