"""A watchdog sweep that dies after committing a room's last end leaves no
end unlogged (issue 46; simulation seed 57).

The sweep is not redelivered: the next sweep asks for the rooms whose
wake-up is overdue, and a room the dead sweep ended (its last message timed
out, the room idle, no wake-up) is not among them; nothing read it again,
and its `timed_out` line stayed in the room's outbox until TTL deleted the
document. Now a sweep's write that leaves its room idle stores when
(`outbox.SWEPT`), each sweep asks for such rooms of the last SWEEP_REREAD_S
(`recently_swept`: one query) and reads them, and that read logs the
sweep's entry (`outbox.of_sweep`). Through the service over the in-memory
fakes (tests/unit/service/test_faults.py).
"""

from __future__ import annotations

from shared import outbox
from shared.events import DeliveryEvent, EventType
from shared.opcounts import begin_request
from shared.room import Enqueue, SendOutcome, SendReturned, decide
from shared.service import DeliveryService
from shared.store import WRITE_ID
from tests.unit.service.test_faults import WATCHDOG_GRACE_MS, Knobs, World, build_service
from tools.sim.fakes import Crash

ROOM = "room-s"


def held_world() -> tuple[World, DeliveryService]:
    """A WhatsApp room holding one message, sent on its last attempt and
    accepted, whose timer is lost: only the watchdog ends it."""
    world = World(Knobs(max_send_attempts=1))
    service = build_service(world)
    now = world.clock.now_us()
    world.store.apply(ROOM, lambda s: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", now, now),
                                             world.policy, "t"))
    state = world.store.load_room(ROOM)
    world.store.apply(ROOM, lambda s: decide(s, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED,
                                                             now + 300_000, "c", provider_message_id="wamid.1"),
                                             world.policy, "t"))
    world.clock.advance_ms(10_000 + 2 * WATCHDOG_GRACE_MS)  # past its deadline and the watchdog's grace
    return world, service


def ends(world: World) -> list[DeliveryEvent]:
    return [e for e in world.events.events if e.room_id == ROOM and e.event is EventType.TIMED_OUT]


def sweep_dies_after_the_end(world: World, service: DeliveryService) -> None:
    """The sweep times m1 out (the room's last message: idle after) and its
    process dies after the commit, before its lines."""
    world.store.crash_after_next_commit()
    try:
        service.handle_sweep()
        raise AssertionError("the process did not die")
    except Crash:
        pass
    doc = world.store.load_doc(ROOM)
    assert doc["wake_at_us"] is None and not ends(world)  # idle, the end only in the outbox
    assert doc[outbox.OUTBOX][outbox.write_key(doc[WRITE_ID])][-1]["event"] == "timed_out"


def test_the_next_sweep_reads_the_idle_room_a_dead_sweep_ended_and_logs_its_end():
    world, service = held_world()
    sweep_dies_after_the_end(world, service)
    begin_request()  # the next sweep: a new process, 15 s later
    world.clock.advance_ms(15_000)
    reply = build_service(world).handle_sweep()
    assert (reply.status, reply.body["overdue"], reply.body["reread"]) == (200, 0, 1)
    (end,) = ends(world)
    assert (end.seq, end.relogged, end.event_id is not None) == (1, True, True)


def test_before_the_fix_the_next_sweep_found_nothing_and_the_end_stayed_unlogged():
    """A sweep's write that stores no `SWEPT` (the code before): the next
    sweep's queries find no room; the check above fails."""
    world, service = held_world()
    world.store.marks_swept = False
    sweep_dies_after_the_end(world, service)
    begin_request()
    world.clock.advance_ms(15_000)
    assert build_service(world).handle_sweep().body["reread"] == 0
    assert not ends(world)


def test_a_found_room_whose_read_logs_nothing_of_the_sweeps_write_loses_the_end():
    """The room found, its read logging only what `concerning` names (the
    code before `of_sweep`): a sweep's read names no seq; the end is lost."""
    world, service = held_world()
    world.store.of_sweep = lambda left, doc, field: {}
    sweep_dies_after_the_end(world, service)
    begin_request()
    world.clock.advance_ms(15_000)
    assert build_service(world).handle_sweep().body["reread"] == 1
    assert not ends(world)


def test_only_a_sweeps_write_that_leaves_the_room_idle_stores_when_and_the_next_write_drops_it():
    """A sweep that lived: its write stores `SWEPT` (the sweep's start);
    the room's next write (an enqueue, not the sweep's) has no such field.
    The next sweep reads the room again and logs the end once more
    (`relogged`, a copy readers drop), and writes nothing."""
    world, service = held_world()
    started = world.clock.now_us()
    assert service.handle_sweep().body["overdue"] == 1
    assert world.store.load_doc(ROOM)[outbox.SWEPT] == started
    commits = world.store.commits
    begin_request()
    world.clock.advance_ms(15_000)
    assert build_service(world).handle_sweep().body["reread"] == 1
    assert world.store.commits == commits
    assert [e.relogged for e in ends(world)] == [None, True]
    now = world.clock.now_us()
    world.store.apply(ROOM, lambda s: decide(s, Enqueue("m2", "whatsapp", "15550001", "hi", now, now),
                                             world.policy, "t"))
    assert outbox.SWEPT not in world.store.load_doc(ROOM)
    assert world.store.recently_swept(0, 10) == []


def test_the_reread_is_limited_to_the_window_of_recent_sweeps():
    """A room a sweep left idle longer ago than SWEEP_REREAD_S is not read again."""
    world, service = held_world()
    service.handle_sweep()
    begin_request()
    world.clock.advance_ms(world.settings.sweep_reread_s * 1000 + 1)
    assert build_service(world).handle_sweep().body["reread"] == 0
