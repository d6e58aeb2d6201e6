"""The operators' actions and views take the time from the clock they are
given (issue 45, item 5: an injected clock), by default the service's,
which shared/bootstrap.py gives: no system clock read in shared/operators.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from shared import config
from shared.events import utc_iso
from shared.operators import OperatorEventLog, Operators
from shared.room import Enqueue, policy_from_settings
from shared.service import DeliveryService, ServiceCore
from tests.fakes import FakePlatform, FakeRoomStore, FakeTimers, SimClock

SETTINGS = dataclasses.replace(config.load(), project="p")


class Views:
    """The store's documents as the operators' views read them (`room_doc`,
    `load_room`, `dead_letter`), over the fake store."""

    def __init__(self, store: FakeRoomStore) -> None:
        self.store = store

    def room_doc(self, room_id: str) -> dict[str, Any] | None:
        return self.store.docs.get(room_id)

    def load_room(self, room_id: str) -> Any:
        return self.store.load_room(room_id)

    def dead_letter(self, dl_id: str) -> dict[str, Any] | None:
        return None  # none kept


def operated(clock: SimClock) -> tuple[DeliveryService, FakeRoomStore]:
    store = FakeRoomStore(clock)
    core = ServiceCore(SETTINGS, policy_from_settings(SETTINGS), store, FakeTimers(clock),  # type: ignore[arg-type]
                       {"whatsapp": FakePlatform(clock, budget_ms=2_000)}, OperatorEventLog(stdout=False),
                       clock=clock)
    return DeliveryService(core), store


def test_an_action_s_event_and_a_view_s_ages_are_by_the_clock_given():
    clock = SimClock()
    service, store = operated(clock)
    service.apply("r1", Enqueue("m1", "whatsapp", "15550001", "hi", clock.now_us(), clock.now_us()), "enqueue")
    started = clock.now_us()
    clock.advance_ms(7_000)
    ops = Operators(service, store=Views(store), clock=clock)  # type: ignore[arg-type]
    result = ops.pause("r1", "alice@example.com", "incident")
    assert result.changed and result.events[0].ts == utc_iso(clock.now_us())
    shown = ops.describe("r1")
    assert shown is not None and shown["in_flight_detail"]["age_ms"] == (clock.now_us() - started) / 1000
    assert ops.redrive("r1:1:9", "alice@example.com", "x").events[0].ts == utc_iso(clock.now_us())


def test_without_a_clock_the_operators_take_the_service_s():
    clock = SimClock()
    service, store = operated(clock)
    assert Operators(service, store=Views(store)).clock is clock  # type: ignore[arg-type]
