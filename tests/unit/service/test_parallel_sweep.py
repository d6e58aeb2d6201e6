"""The watchdog rescues overdue rooms several at a time, in batches, within
its time budget (issue 33, item 3): every overdue room once, none twice, and
a room that fails is counted and left for the next sweep."""

from __future__ import annotations

import dataclasses

from google.api_core import exceptions as gexc

from shared.room import Enqueue, decide
from tests.unit.service.test_faults import WATCHDOG_GRACE_MS, Knobs, World, build_service


def overdue_rooms(world: World, n: int) -> list[str]:
    """n rooms with a message in flight whose timer was never armed (made through the store only)."""
    rooms = [f"room-{i:03d}" for i in range(n)]
    now = world.clock.now_us()
    for room in rooms:
        world.store.apply(room, lambda s, r=room: decide(s, Enqueue(f"m-{r}", "whatsapp", "15550001", "hi", now, now),
                                                         world.policy, "test"))
    world.clock.advance_ms(WATCHDOG_GRACE_MS + 60_000)
    return rooms


def test_a_sweep_rescues_every_overdue_room_once_in_batches_several_at_a_time():
    world = World(Knobs(sweep_batch_size=7))
    world.settings = dataclasses.replace(world.settings, sweep_concurrency=8)
    rooms = overdue_rooms(world, 40)
    body = build_service(world).handle_sweep().body
    assert (body["overdue"], body["rescued"], body["failed"], body["left"]) == (40, 40, 0, 0)
    rescued = [e.room_id for e in world.events.events if e.event == "watchdog_rescued"]
    assert sorted(rescued) == rooms  # every room once
    assert all(world.store.load_room(r).wake_at_us > world.clock.now_us() for r in rooms)


def test_a_room_that_fails_is_counted_and_left_and_the_others_are_rescued(monkeypatch):
    world = World(Knobs(sweep_batch_size=10))
    world.settings = dataclasses.replace(world.settings, sweep_concurrency=4)
    overdue_rooms(world, 10)
    real_apply = world.store.apply

    def apply(room_id, decide_fn):
        if room_id == "room-003":
            raise gexc.ServiceUnavailable("injected: Firestore unavailable for this room")
        return real_apply(room_id, decide_fn)

    monkeypatch.setattr(world.store, "apply", apply)
    body = build_service(world).handle_sweep().body
    assert (body["overdue"], body["rescued"], body["failed"]) == (10, 9, 1)


def test_a_spent_budget_leaves_the_rest_for_the_next_sweep():
    world = World(Knobs(sweep_batch_size=50))
    world.settings = dataclasses.replace(world.settings, sweep_concurrency=2, sweep_budget_s=0)
    rooms = overdue_rooms(world, 5)
    body = build_service(world).handle_sweep().body
    assert (body["overdue"], body["rescued"]) == (0, 0)
    assert all(world.store.load_room(r).wake_at_us < world.clock.now_us() for r in rooms)  # still overdue
    world.settings = dataclasses.replace(world.settings, sweep_budget_s=45)
    assert build_service(world).handle_sweep().body["rescued"] == 5  # the next sweep takes them
