"""The lines a room's outbox logs again (shared/outbox.py) carry
`"relogged": true`, the lines logged first-hand do not: infra/analytics.tf
keeps the marked ones out of the _Default log bucket by that field, and the
readers keep one line per (room, event id) whichever comes first."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from pathlib import Path

from shared import outbox
from shared.events import DeliveryEvent, EventLog, EventType
from shared.opcounts import begin_request
from shared.room import Decision, RoomState
from tests.unit.service.test_faults import ExploreAmbiguityMachine, replay
from tools.local.audit import read_events
from tools.sim.fakes import FakeRoomStore, SimClock


def _lines(state: ExploreAmbiguityMachine, kind: EventType, room: str = "room-0") -> list[DeliveryEvent]:
    return [e for e in state.world.events.events if e.event is kind and e.room_id == room]


def _writes(event: DeliveryEvent) -> Callable[[RoomState], Decision]:
    """A decision that writes the room as it is, with one event."""
    return lambda state: Decision(state, events=(event,))


def _request(store: FakeRoomStore, log: EventLog, event: DeliveryEvent) -> None:
    """One request's room transaction, then its lines logged after the commit, as the service does."""
    begin_request()
    decision = store.apply("room-1", _writes(event))
    for e in decision.events:
        log.emit(e)
    outbox.logged("room-1", decision.events)


def test_a_later_transaction_marks_the_lines_it_logs_again_and_first_hand_lines_are_unmarked() -> None:
    """A request's write logs its line after the commit (unmarked); the
    room's next transaction, another request, finds that write's entry in
    the outbox and logs it again (marked), then its own line (unmarked)."""
    store, log = FakeRoomStore(SimClock()), EventLog(keep=True)
    store.outbox_sink = outbox.sink_of(log)
    enqueued = DeliveryEvent(EventType.ENQUEUED, "2026-11-28T01:00:00.000000Z", "enqueue", "room-1", seq=2)
    acked = DeliveryEvent(EventType.ACKED, "2026-11-28T01:00:01.000000Z", "webhook", "room-1", seq=1, attempt=1)
    contextvars.copy_context().run(_request, store, log, enqueued)
    contextvars.copy_context().run(_request, store, log, acked)
    assert [(e.event, e.relogged) for e in log.events] == [
        (EventType.ENQUEUED, None), (EventType.ENQUEUED, True), (EventType.ACKED, None)]
    assert log.events[0].event_id == log.events[1].event_id is not None
    assert log.events[1].to_record()["relogged"] is True and "relogged" not in log.events[0].to_record()


def test_the_only_line_of_an_event_whose_process_died_is_the_marked_one() -> None:
    """The redelivery path (a read that decides nothing logs the entries of
    its own message): the process died right after m1's commit, so the
    marked line is the only one, and it is kept where one line per event
    id is kept (tools.local.audit.read_events; the pipeline the same,
    pipeline/lifecycle.py `distinct_events`)."""
    state = replay(ExploreAmbiguityMachine, """
        state.crash_after_next_commit()
        state.publish(room='room-0')
    """)
    enqueued = _lines(state, EventType.ENQUEUED)
    assert enqueued and all(e.relogged is True for e in enqueued)


def test_the_marker_is_a_line_field_and_readers_keep_the_first_line_whichever(tmp_path: Path) -> None:
    log_path = tmp_path / "events.jsonl"
    log = EventLog(str(log_path))
    first_hand = DeliveryEvent(EventType.ACKED, "2026-11-28T01:00:00.000000Z", "webhook", "room-7", seq=3,
                               attempt=1, event_id="wabc.0")
    again = DeliveryEvent(**{**first_hand.__dict__, "relogged": True})
    log.emit_again(again)  # another request logged it before its own process did
    log.emit(first_hand)
    written = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert written[0]["relogged"] is True and "relogged" not in written[1]
    (kept,) = read_events(log_path)
    assert kept["event_id"] == "wabc.0" and kept["relogged"] is True
    assert read_events(log_path)[0]["event"] == "acked"
